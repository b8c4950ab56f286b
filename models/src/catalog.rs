//! The built-in domains and handlers, each with the verdict it declares.

use retrysim_sim::{Invariant, Simulator, Subject};
use std::fmt;

/// What a built-in handler declares about itself; the test suite holds it to this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Declared {
    /// No bounded exploration breaks any invariant that applies.
    Correct,
    /// Some schedule breaks `caught_by`, the invariant its flaw violates.
    Faulty {
        /// The invariant the harness must catch it with.
        caught_by: Invariant,
    },
}

impl fmt::Display for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Declared::Correct => f.write_str("correct"),
            Declared::Faulty { caught_by } => write!(f, "faulty ({caught_by})"),
        }
    }
}

/// A domain: a system's store and workload, shared by its handlers.
#[derive(Clone, Copy, Debug)]
pub struct DomainEntry {
    /// The domain's name, e.g. `counter`.
    pub name: &'static str,
    /// One line on what it models.
    pub summary: &'static str,
}

/// A built-in handler of a domain.
#[derive(Clone, Copy)]
pub struct HandlerEntry {
    /// The domain's name.
    pub domain: &'static str,
    /// The handler's name, e.g. `keyed-sqlite`.
    pub handler: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// The verdict it declares.
    pub declared: Declared,
    /// Builds a fresh subject (with its own store) for this handler.
    pub build: fn() -> Box<dyn Subject>,
}

impl fmt::Debug for HandlerEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} ({})", self.domain, self.handler, self.declared)
    }
}

fn subject<S: retrysim_sim::System + Default + 'static>() -> Box<dyn Subject> {
    Box::new(Simulator::new(S::default()))
}

const DOMAINS: &[DomainEntry] = &[DomainEntry {
    name: "counter",
    summary: "the retry lesson's event counter: a lost reply, a retry, a reused key",
}];

const HANDLERS: &[HandlerEntry] = &[
    HandlerEntry {
        domain: "counter",
        handler: "naive",
        summary: "adds on every arrival",
        declared: Declared::Faulty {
            caught_by: Invariant::AtMostOnceEffect,
        },
        build: subject::<crate::counter::Naive>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "keyed-memory",
        summary:
            "keyed records in process memory: lost on a crash, with a gap between effect and record",
        declared: Declared::Faulty {
            caught_by: Invariant::AtMostOnceEffect,
        },
        build: subject::<crate::counter::KeyedMemory>,
    },
    HandlerEntry {
        domain: "counter",
        handler: "keyed-sqlite",
        summary: "effect and record in one SQLite transaction",
        declared: Declared::Correct,
        build: subject::<crate::counter::KeyedSqlite>,
    },
];

/// Every built-in domain.
pub fn domains() -> &'static [DomainEntry] {
    DOMAINS
}

/// Every built-in handler, grouped by domain.
pub fn handlers() -> &'static [HandlerEntry] {
    HANDLERS
}

/// Why a model or handler name was not found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// No domain has this name.
    UnknownModel(String),
    /// The domain has no handler of this name.
    UnknownHandler {
        /// The domain asked for.
        model: String,
        /// The handler asked for.
        handler: String,
    },
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::UnknownModel(model) => {
                let known: Vec<&str> = DOMAINS.iter().map(|d| d.name).collect();
                write!(
                    f,
                    "unknown model {model:?}; known models: {}",
                    known.join(", ")
                )
            }
            LookupError::UnknownHandler { model, handler } => {
                let known: Vec<&str> = HANDLERS
                    .iter()
                    .filter(|h| h.domain == model)
                    .map(|h| h.handler)
                    .collect();
                write!(
                    f,
                    "unknown handler {handler:?} for model {model}; known handlers: {}",
                    known.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for LookupError {}

/// The handler `handler` of the domain `model`.
pub fn find(model: &str, handler: &str) -> Result<&'static HandlerEntry, LookupError> {
    if !DOMAINS.iter().any(|d| d.name == model) {
        return Err(LookupError::UnknownModel(model.to_string()));
    }
    HANDLERS
        .iter()
        .find(|h| h.domain == model && h.handler == handler)
        .ok_or_else(|| LookupError::UnknownHandler {
            model: model.to_string(),
            handler: handler.to_string(),
        })
}
