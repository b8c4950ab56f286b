//! The handler's view of the engine ([`Ctx`]): crash points, the session a request came in
//! on, the simulated clock and an outside service; and what stops a handler at a crash point
//! ([`Crash`]).

use crate::clock::Clock;
use serde::Serialize;
use std::any::Any;

/// The handler stopped because the server crashed at a crash point. Return it with `?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Crash {
    /// The crash point's name.
    pub point: &'static str,
}

/// A client's session with the server: which client, and how many times it has reconnected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Session {
    /// The client, by index (0 = `c1`).
    pub client: u32,
    /// 0 for the first session, then one more for each reconnect.
    pub generation: u32,
}

/// The handler's view of the engine: crash points, the session a request came in on, the
/// simulated clock, and the outside service its system gives it, if any.
pub struct Ctx<'r> {
    pub(crate) points: Option<&'r mut dyn CrashPoints>,
    pub(crate) session: Session,
    pub(crate) clock: Clock,
    /// The outside service of the handler's system (a [`crate::Provider`]), read through
    /// `Ctx::provider`.
    pub(crate) outside: Option<&'r dyn Any>,
    /// Whether the request is a read ([`crate::Intent::read`]).
    pub(crate) read: bool,
}

/// Where a handler's crash points go: the engine decides at each whether the server crashes.
pub(crate) trait CrashPoints {
    fn at(&mut self, point: &'static str) -> Result<(), Crash>;

    /// A crash point at which the handler calls an outside service: then what becomes of the
    /// call on its lossy link.
    fn call(&mut self, point: &'static str) -> Result<Link, Crash>;

    /// Whether the last `Err(Crash)` was the run's end rather than a crash (see
    /// [`Ctx::abandoned`]).
    fn abandoned(&self) -> bool {
        false
    }
}

/// What becomes of a call to an outside service (a [`crate::Provider`]) on its own lossy
/// link, as the schedule chooses. A lost call or answer is a dropped message: it spends the
/// drop budget ([`crate::Bounds::drops_max`]) and counts as a drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// The call reaches the service and its answer comes back.
    Answered,
    /// The call is lost on the way: the service never sees it; the caller hears nothing.
    CallLost,
    /// The service acts on the call, but its answer is lost: the caller hears nothing.
    AnswerLost,
}

impl<'r> Ctx<'r> {
    /// A context that never crashes, for calling a handler directly (outside a run).
    pub fn never_crash() -> Ctx<'static> {
        Self::never_crash_in(Session::default())
    }

    /// A context that never crashes, for a request that came in on `session`, with a clock
    /// that stays at 0.
    pub fn never_crash_in(session: Session) -> Ctx<'static> {
        Ctx {
            points: None,
            session,
            clock: Clock::default(),
            outside: None,
            read: false,
        }
    }

    /// A context that never crashes, reading `clock`.
    pub(crate) fn never_crash_at(session: Session, clock: &Clock) -> Ctx<'static> {
        Ctx {
            points: None,
            session,
            clock: clock.clone(),
            outside: None,
            read: false,
        }
    }

    /// A context like this one that also gives the handler `outside`, its system's outside
    /// service (read through `Ctx::provider`), for as long as it lives.
    pub(crate) fn with_outside<'b>(&'b mut self, outside: &'b dyn Any) -> Ctx<'b> {
        Ctx {
            points: match &mut self.points {
                Some(points) => Some(&mut **points),
                None => None,
            },
            session: self.session,
            clock: self.clock.clone(),
            outside: Some(outside),
            read: self.read,
        }
    }

    /// Simulated milliseconds since the run began (the same clock as SQL's
    /// `retrysim_now()`). While an invocation is paused at a crash point, time may pass.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Whether the request is a read ([`crate::Intent::read`]): one its client expects to
    /// commit nothing (a system may send it without the client's key, or read-only).
    pub fn reads(&self) -> bool {
        self.read
    }

    /// The session the request came in on. Server memory kept per session (instead of in the
    /// store) is lost when the client reconnects.
    pub fn session(&self) -> Session {
        self.session
    }

    /// Marks a crash point named `point`. Returns `Err(Crash)` when the run crashes the server
    /// here: return it at once (`ctx.point("after-effect")?`), leaving uncommitted work to be
    /// rolled back when the engine closes the connection.
    pub fn point(&mut self, point: &'static str) -> Result<(), Crash> {
        match self.points.as_mut() {
            Some(points) => points.at(point),
            None => Ok(()),
        }
    }

    /// Whether the `Err(Crash)` a crash point just returned stops this invocation because its
    /// run has ended, not because the server crashed: it was paused when the run met a state
    /// whose future was explored before. Nothing it does from here is judged or shown, and the
    /// store is put back before the next run. A handler whose server runs outside the
    /// engine (a real process) may let its call finish there instead of killing the process,
    /// so that the next run need not start it again; one that does must not let that call's
    /// effects reach the ground truth.
    pub fn abandoned(&self) -> bool {
        self.points
            .as_ref()
            .is_some_and(|points| points.abandoned())
    }

    /// Marks a crash point named `point` at which the handler calls an outside service, and
    /// returns what becomes of the call on the service's lossy link ([`Link`]). An outside
    /// service such as [`crate::Provider`] calls it for the handler. With overlapping
    /// invocations the call is a pause: other invocations run and time passes while it is in
    /// flight. A context that never crashes always answers [`Link::Answered`].
    pub fn call(&mut self, point: &'static str) -> Result<Link, Crash> {
        match self.points.as_mut() {
            Some(points) => points.call(point),
            None => Ok(Link::Answered),
        }
    }
}
