//! The crash-point helpers, one file per language, as the binary carries them: a user who
//! installed `retrysim` without its source prints the one for their server with `retrysim
//! helper LANGUAGE` and copies it beside the server.

/// A language a crash-point helper is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelperLanguage {
    /// `retrysim_points.py`: blocking `point()` and `now_ms()`, and the warm spare's gate.
    Python,
    /// `retrysim_points_asyncio.py`: the same, awaited, for an asyncio server; it imports
    /// `retrysim_points.py`, which goes beside it.
    PythonAsync,
    /// `retrysim_points.ts`: for a Node server.
    Typescript,
    /// `retrysim_points.rs`: a module for a Rust server.
    Rust,
}

/// A helper's file: the name to save it under, its text, and the other helper it imports
/// (saved beside it), if any.
#[derive(Clone, Copy, Debug)]
pub struct HelperFile {
    /// The file name the helper is imported by.
    pub name: &'static str,
    /// Its source.
    pub text: &'static str,
    /// The helper it imports, which must sit beside it.
    pub imports: Option<HelperLanguage>,
}

impl HelperLanguage {
    /// The helper for this language.
    pub fn file(self) -> HelperFile {
        let (name, text, imports) = match self {
            HelperLanguage::Python => (
                "retrysim_points.py",
                include_str!("../helpers/retrysim_points.py"),
                None,
            ),
            HelperLanguage::PythonAsync => (
                "retrysim_points_asyncio.py",
                include_str!("../helpers/retrysim_points_asyncio.py"),
                Some(HelperLanguage::Python),
            ),
            HelperLanguage::Typescript => (
                "retrysim_points.ts",
                include_str!("../helpers/retrysim_points.ts"),
                None,
            ),
            HelperLanguage::Rust => (
                "retrysim_points.rs",
                include_str!("../helpers/retrysim_points.rs"),
                None,
            ),
        };
        HelperFile {
            name,
            text,
            imports,
        }
    }
}
