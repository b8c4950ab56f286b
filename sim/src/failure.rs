//! A system under test that fails the harness (falls silent, exits, answers garbage, answers
//! a replayed run differently) is no bug of the harness: it ends the check with a panic whose
//! payload is a [`SubjectFailure`], which a caller tells from any other panic (a bug, to be
//! reported with its location). The tape of the run a panic ended is kept
//! ([`crate::panicked_run_tape`]), so that the failure can be replayed.

/// The payload of a panic that says the system under test failed the harness, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubjectFailure(pub String);

impl std::fmt::Display for SubjectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Ends the check: the system under test failed the harness, as `message` says.
pub fn fail_subject(message: impl Into<String>) -> ! {
    std::panic::panic_any(SubjectFailure(message.into()))
}
