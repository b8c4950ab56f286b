//! [`Sandbox`]: call a system's handler directly, one request at a time, outside any schedule.
//!
//! For literal tests of a contract ("lost response, then a replay from a fresh connection"):
//! the store, the restart after a crash and the ground truth are the real ones, but nothing is
//! chosen: no fault is injected and every call runs to its end.

use crate::run::{Ctx, Session};
use crate::system::{IntentId, IntentTag, Reply, Status, System};

/// A system's store and handler, driven by hand.
pub struct Sandbox<S: System> {
    system: S,
    store: S::Store,
    memory: S::Memory,
    tag: IntentTag,
}

impl<S: System> Sandbox<S> {
    /// Opens a fresh store for `system`.
    pub fn new(system: S) -> Self {
        let tag = IntentTag::default();
        let store = system.open(&tag);
        Sandbox {
            system,
            store,
            memory: S::Memory::default(),
            tag,
        }
    }

    /// Handles `request` on behalf of `intent` (the ground truth records its effects under
    /// that intent) and returns the reply.
    pub fn call(&mut self, intent: IntentId, request: &S::Request) -> Reply<S::Value> {
        self.tag.set(Some(intent));
        let mut ctx = Ctx::never_crash();
        let result = self
            .system
            .handle(&mut ctx, &mut self.store, &mut self.memory, request);
        self.tag.set(None);
        result.expect("a sandbox call never crashes")
    }

    /// Answers a status lookup of `request` made on `session`.
    pub fn lookup(&mut self, session: Session, request: &S::Request) -> Status<S::Value> {
        let mut ctx = Ctx::never_crash_in(session);
        self.system
            .lookup(&mut ctx, &mut self.store, &mut self.memory, request)
            .expect("a sandbox lookup never crashes")
    }

    /// Restarts the server as after a crash: volatile memory lost, connections reopened.
    pub fn restart(&mut self) {
        self.memory = S::Memory::default();
        self.system.restart(&mut self.store);
    }

    /// Applies an outside event (an administrator's change).
    pub fn apply(&mut self, event: &S::Event) {
        self.system.apply_event(&mut self.store, event);
    }

    /// The ground truth so far: the intent of every committed effect.
    pub fn effects(&self) -> Vec<IntentId> {
        self.system.effects(&self.store)
    }

    /// The store, for reading committed state or installing fixtures.
    pub fn store(&self) -> &S::Store {
        &self.store
    }

    /// The system under test.
    pub fn system(&self) -> &S {
        &self.system
    }
}
