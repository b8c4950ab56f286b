//! retrysim's integration tests, through the public API and the `retrysim` binary. One test
//! binary with modules keeps the build fast.

mod api;
mod cli;
mod counter;
mod determinism;
mod exhaustive;
mod interval;
mod reservation;
mod tape;
mod timelines;

use retrysim::models::{self, HandlerEntry};
use retrysim::Subject;

/// The built-in handler `domain/handler`.
pub fn entry(domain: &str, handler: &str) -> &'static HandlerEntry {
    models::find(domain, handler).expect("a built-in handler")
}

/// A fresh subject for `domain/handler`.
pub fn subject(domain: &str, handler: &str) -> Box<dyn Subject> {
    (entry(domain, handler).build)()
}
