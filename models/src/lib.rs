//! The systems under test of retrysim: one module per domain, each with its store, workload and
//! handlers (correct and named faulty variants), and the [`catalog`] the CLI and tests use.

pub mod catalog;
pub mod counter;
pub mod interval;
pub mod payment;
pub mod reservation;

pub use catalog::{
    domain_named, domains, find, handlers, Declared, DomainEntry, HandlerEntry, LookupError,
    SCENARIO_DOMAIN, SCENARIO_DOMAIN_BEFORE,
};
