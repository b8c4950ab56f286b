//! Handler invocations that overlap. Each runs on a stack of its own (a coroutine) and a SQLite
//! connection of its own, and hands control back to the scheduler at each crash point and
//! whenever SQLite finds the database locked. One runs at a time, chosen by the schedule, so
//! every interleaving is a function of the run's choices.

use super::{CrashPoints, Ctx, Link, Session};
use crate::clock::Clock;
use crate::ctx::Crash;
use crate::vocabulary::{IntentTag, Reply};
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use rusqlite::{ffi, Connection};
use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of stack for one invocation: SQLite needs tens of KiB; pages are touched lazily.
const STACK_BYTES: usize = 256 * 1024;

/// Why a running invocation handed control back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Pause {
    /// It reached a crash point.
    Point(&'static str),
    /// SQLite found the database locked; it waits for the holder.
    Blocked,
    /// It reached a crash point at which it calls an outside service.
    Call(&'static str),
}

/// How a paused invocation goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Go {
    /// Carry on.
    Continue,
    /// The server crashed: the crash point returns `Err(Crash)`, a lock wait gives up.
    Crash,
    /// The run was pruned with the invocation paused (nothing ahead of it is judged): as
    /// [`Go::Crash`], and the context says so ([`Ctx::abandoned`]).
    Abandon,
    /// Carry on with the outside call it paused at, which comes to this.
    Call(Link),
}

/// What one resumption of an invocation came to.
pub(crate) enum Turn<V> {
    /// It paused.
    Paused(Pause),
    /// It returned.
    Finished(Result<Reply<V>, Crash>),
}

type TaskYielder = Yielder<Go, Pause>;
type Body<V> = Coroutine<Go, Pause, Result<Reply<V>, Crash>, DefaultStack>;

thread_local! {
    /// The yielder of the invocation running on this thread, if one is.
    static RUNNING: Cell<*const TaskYielder> = const { Cell::new(ptr::null()) };
}

thread_local! {
    /// Whether the invocation running on this thread was last resumed to be abandoned
    /// ([`Go::Abandon`]): read by its context ([`Ctx::abandoned`]), whether the pause was a
    /// crash point or a lock wait.
    static ABANDONED: Cell<bool> = const { Cell::new(false) };
}

/// Pauses the running invocation and returns how it goes on.
fn pause(yielder: &TaskYielder, why: Pause) -> Go {
    let go = yielder.suspend(why);
    RUNNING.with(|running| running.set(yielder));
    ABANDONED.with(|abandoned| abandoned.set(go == Go::Abandon));
    go
}

/// SQLite's busy handler for a connection whose waits belong to the schedule: inside an
/// invocation of an overlapping run, it pauses the invocation until the scheduler resumes it
/// (then SQLite tries the lock again); anywhere else it gives up at once, as SQLite does
/// without a handler. The engine installs it on every invocation's connection; install it on
/// any further connection a handler opens (`connection.busy_handler(Some(wait_for_lock))`).
pub fn wait_for_lock(_attempts: i32) -> bool {
    let running = RUNNING.with(Cell::get);
    if running.is_null() {
        return false;
    }
    // SAFETY: RUNNING is set on entry to an invocation's coroutine and after each of its
    // pauses, and cleared when control returns to the scheduler; SQLite calls this handler on
    // the running coroutine's own stack, so the yielder it points at is alive.
    let yielder = unsafe { &*running };
    pause(yielder, Pause::Blocked) == Go::Continue
}

/// The crash points of an invocation: each pauses it; the scheduler decides on resumption.
struct PausingPoints<'y> {
    yielder: &'y TaskYielder,
}

impl CrashPoints for PausingPoints<'_> {
    fn at(&mut self, point: &'static str) -> Result<(), Crash> {
        match pause(self.yielder, Pause::Point(point)) {
            Go::Continue | Go::Call(_) => Ok(()),
            Go::Crash | Go::Abandon => Err(Crash { point }),
        }
    }

    fn call(&mut self, point: &'static str) -> Result<Link, Crash> {
        match pause(self.yielder, Pause::Call(point)) {
            Go::Call(link) => Ok(link),
            Go::Continue => Ok(Link::Answered),
            Go::Crash | Go::Abandon => Err(Crash { point }),
        }
    }

    fn abandoned(&self) -> bool {
        ABANDONED.with(Cell::get)
    }
}

/// One invocation in progress: its coroutine and its connection.
pub(crate) struct Task<V> {
    // Declared before the connection, which the body borrows: dropped first.
    body: Option<Body<V>>,
    /// Owned here and lent to the body; closing it rolls back what was not committed.
    connection: Box<Connection>,
    raw: *mut ffi::sqlite3,
}

impl<V> Task<V> {
    /// Prepares `handle` to run on `connection` (which it borrows through the task; see
    /// [`prepare_connection`]) and a stack from `stacks`.
    ///
    /// # Safety
    /// Everything `handle` borrows must outlive the task's run: the caller resumes the task
    /// until it finishes (see [`Task::resume`]) before any of it is moved or dropped.
    pub(crate) unsafe fn new<'h>(
        stacks: &mut Vec<DefaultStack>,
        connection: Connection,
        (session, clock, read): (Session, Clock, bool),
        handle: impl FnOnce(&mut Ctx<'_>, &Connection) -> Result<Reply<V>, Crash> + 'h,
    ) -> Self {
        let connection = Box::new(connection);
        // SAFETY: the handle is only read while the connection, boxed in the task, is alive.
        let raw = unsafe { connection.handle() };
        let lent: *const Connection = &*connection;
        let stack = stacks
            .pop()
            .unwrap_or_else(|| DefaultStack::new(STACK_BYTES).expect("a coroutine stack maps"));
        let run = move |yielder: &TaskYielder, _: Go| {
            RUNNING.with(|running| running.set(yielder));
            let mut points = PausingPoints { yielder };
            let mut ctx = Ctx {
                points: Some(&mut points),
                session,
                clock,
                outside: None,
                read,
            };
            // SAFETY: the connection is boxed in the task and outlives its body.
            handle(&mut ctx, unsafe { &*lent })
        };
        // SAFETY: the caller keeps what `handle` borrows alive until the body finishes.
        let body = unsafe { Coroutine::with_stack_unchecked(stack, run) };
        Task {
            body: Some(body),
            connection,
            raw,
        }
    }

    /// Runs the invocation until it pauses or returns. A finished task gives its stack back
    /// to `stacks`.
    pub(crate) fn resume(&mut self, go: Go, stacks: &mut Vec<DefaultStack>) -> Turn<V> {
        let body = self.body.as_mut().expect("a finished task is not resumed");
        let turn = body.resume(go);
        RUNNING.with(|running| running.set(ptr::null()));
        match turn {
            CoroutineResult::Yield(pause) => Turn::Paused(pause),
            CoroutineResult::Return(result) => {
                let body = self.body.take().expect("the body just returned");
                stacks.push(body.into_stack());
                Turn::Finished(result)
            }
        }
    }

    /// Resumes a task the server's crash (`go` is [`Go::Crash`]) or the run's end
    /// ([`Go::Abandon`]) interrupted until its handler returns.
    pub(crate) fn wind_down(&mut self, go: Go, stacks: &mut Vec<DefaultStack>) {
        let mut resumptions = 0u32;
        while self.body.is_some() {
            resumptions += 1;
            assert!(
                resumptions < 10_000,
                "a handler keeps running after its crash point returned Err(Crash)"
            );
            let _ = self.resume(go, stacks);
        }
    }

    /// Whether the invocation's connection is in a write transaction (it holds the write lock
    /// or waits to commit): then nobody else can read the in-memory database.
    pub(crate) fn writing(&self) -> bool {
        // SAFETY: `raw` is the handle of the boxed connection, alive as long as the task.
        unsafe { ffi::sqlite3_txn_state(self.raw, ptr::null()) == ffi::SQLITE_TXN_WRITE }
    }

    /// The connection of a finished invocation, for the next one: an invocation that ended
    /// in a transaction has it rolled back.
    pub(crate) fn into_connection(self) -> Connection {
        assert!(
            self.body.is_none(),
            "only a finished task gives its connection back"
        );
        if !self.connection.is_autocommit() {
            // A failed rollback leaves the connection to be closed by the next crash.
            let _ = self.connection.execute_batch("ROLLBACK");
        }
        *self.connection
    }
}

/// Makes `connection` an invocation's connection: its lock waits belong to the schedule
/// ([`wait_for_lock`]), its commits are counted into `commits`, and one fails when `tag` says
/// a storage fault is due.
pub(crate) fn prepare_connection(
    connection: Connection,
    commits: &Arc<AtomicU64>,
    tag: &IntentTag,
) -> Connection {
    connection
        .busy_handler(Some(wait_for_lock))
        .expect("a busy handler installs");
    let counted = Arc::clone(commits);
    let tag = tag.clone();
    // A database on the harness's VFS fails the COMMIT's write itself, with an I/O error; on
    // any other, the commit hook fails the COMMIT.
    let hook_fails = !crate::fault_vfs::holds(&connection);
    connection.commit_hook(Some(move || {
        if hook_fails && tag.commit_fails() {
            return true;
        }
        counted.fetch_add(1, Ordering::Relaxed);
        false
    }));
    connection
}
