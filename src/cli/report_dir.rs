//! The no-argument matrix and `report --out DIR`: the matrix of every built-in handler, and a
//! directory of its failure pages written whole or not at all.

use super::commands::{cores, exit_for, shrink_first, timed_explore};
use super::output::{progress_shown, Printed};
use super::*;

/// Every built-in handler explored over `seeds` under its own bounds: the matrix's rows.
pub(super) fn matrix_rows(seeds: &Range<u64>) -> Vec<MatrixRow<'static>> {
    let threads = cores();
    let mut rows = Vec::new();
    for entry in models::handlers() {
        let bounds = entry.bounds_from(Bounds::default());
        let shown = progress_shown(false);
        let (exploration, _) =
            timed_explore(&entry.build, seeds.clone(), (&bounds, threads), shown);
        let applicable = (entry.build)().invariants();
        rows.push(MatrixRow {
            entry,
            exploration,
            applicable,
        });
    }
    rows
}

/// `retrysim report --out DIR`: the matrix as `DIR/index.html`, and for every failing cell
/// its shortest failure as a page and a Mermaid diagram beside it. The directory is made (or
/// found) before any exploring, so bad input writes nothing.
pub(super) fn run_report_dir(
    dir: &std::path::Path,
    seeds: Range<u64>,
) -> Result<Printed, UsageError> {
    if seeds.is_empty() {
        return Err(UsageError(format!(
            "--seeds {}..{} is empty; the end is exclusive",
            seeds.start, seeds.end
        )));
    }
    let staging = Staging::beside(dir)?;
    let rows = matrix_rows(&seeds);
    let failures: usize = rows
        .iter()
        .map(|row| row.exploration.violations.len())
        .sum();
    // Shrinking every failure takes most of the command's time: a line for each, as it goes.
    note(&format!(
        "retrysim report: shrinking {failures} failures into pages and diagrams"
    ));
    let (mut pages, mut shrinking) = (0, 0);
    for row in &rows {
        let bounds = row.entry.bounds_from(Bounds::default());
        for failure in &row.exploration.violations {
            let invariant = failure.invariant;
            shrinking += 1;
            note(&format!(
                "failure {shrinking} of {failures}: {}/{} {invariant}",
                row.entry.domain, row.entry.handler
            ));
            let Some(shrunk) =
                shrink_first(&row.entry.build, &bounds, &row.exploration, Some(invariant))
            else {
                continue;
            };
            let file = crate::html::cell_file(row.entry, invariant);
            let page = crate::html::run_html(row.entry, &shrunk.bounds, &shrunk.outcome);
            let diagram = report::run_mermaid(row.entry, &shrunk.bounds, &shrunk.outcome);
            staging.write(&format!("{file}.html"), &page)?;
            staging.write(&format!("{file}.mmd"), &diagram)?;
            let title = format!(
                "{}/{}: {}",
                row.entry.domain,
                row.entry.handler,
                invariant.name()
            );
            staging.write(
                &format!("{file}-diagram.html"),
                &crate::diagram::diagram_page(&title, &diagram),
            )?;
            pages += 1;
        }
    }
    staging.write("index.html", &crate::html::matrix_page(&rows, &seeds))?;
    staging.put_in_place()?;
    let mut out = Printed::new();
    let _ = writeln!(
        out.text,
        "wrote {} with {pages} failure pages and their sequence diagrams",
        dir.join("index.html").display()
    );
    Ok(out.ending(exit_for(rows.iter().all(MatrixRow::as_declared))))
}

/// A report directory being written: a hidden directory beside the one asked for, made
/// before any run (so an unwritable place is said at once), renamed into place only once every
/// file is written. An error, or an interrupt, leaves the directory asked for as it was.
pub(super) struct Staging {
    /// The directory asked for.
    pub(super) target: std::path::PathBuf,
    /// Where the files are written first.
    pub(super) path: std::path::PathBuf,
}

impl Staging {
    pub(super) fn beside(target: &std::path::Path) -> Result<Self, UsageError> {
        let name = target.file_name().ok_or_else(|| {
            UsageError(format!("--out {}: not a directory name", target.display()))
        })?;
        if target.exists() && !target.is_dir() {
            return Err(UsageError(format!(
                "--out {}: a file is there, not a directory",
                target.display()
            )));
        }
        let parent = match target.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let hidden = format!(".{}.partial-{}", name.to_string_lossy(), std::process::id());
        let path = parent.join(hidden);
        std::fs::create_dir_all(&path)
            .map_err(|error| UsageError(format!("cannot write {}: {error}", path.display())))?;
        Ok(Staging {
            target: target.to_path_buf(),
            path,
        })
    }

    /// Writes `name` into the staging directory; on an error, says which file.
    pub(super) fn write(&self, name: &str, text: &str) -> Result<(), UsageError> {
        let file = self.path.join(name);
        std::fs::write(&file, text).map_err(|error| {
            let _ = std::fs::remove_dir_all(&self.path);
            UsageError(format!("cannot write {}: {error}", file.display()))
        })
    }

    /// Renames the written directory into place, replacing what was there.
    pub(super) fn put_in_place(self) -> Result<(), UsageError> {
        let failed = |what: &std::path::Path, error: std::io::Error| {
            UsageError(format!("cannot replace {}: {error}", what.display()))
        };
        if self.target.exists() {
            let old = self.path.with_extension("old");
            std::fs::rename(&self.target, &old).map_err(|error| failed(&self.target, error))?;
            std::fs::rename(&self.path, &self.target)
                .map_err(|error| failed(&self.target, error))?;
            std::fs::remove_dir_all(&old).map_err(|error| failed(&old, error))?;
        } else {
            std::fs::rename(&self.path, &self.target)
                .map_err(|error| failed(&self.target, error))?;
        }
        Ok(())
    }
}

pub(super) fn run_matrix(width_chars: usize) -> Printed {
    let bounds = Bounds::default();
    let bounds_of = |entry: &HandlerEntry| entry.bounds_from(bounds);
    let rows = matrix_rows(&DEFAULT_SEEDS);
    let mut out = Printed::new();
    let _ = writeln!(
        out.text,
        "retrysim: every built-in handler over seeds {}..{}",
        DEFAULT_SEEDS.start, DEFAULT_SEEDS.end
    );
    let _ = writeln!(out.text, "bounds: {bounds}");
    let overlapping: Vec<String> = models::handlers()
        .iter()
        .filter(|entry| entry.invocations_max != bounds.invocations_max)
        .map(|entry| format!("{}/{}", entry.domain, entry.handler))
        .collect();
    if !overlapping.is_empty() {
        let _ = writeln!(
            out.text,
            "invocations_max=2 (overlapping invocations) for {}",
            overlapping.join(", ")
        );
    }
    let failing_writes: Vec<String> = models::handlers()
        .iter()
        .filter(|entry| entry.storage_faults_max != bounds.storage_faults_max)
        .map(|entry| format!("{}/{}", entry.domain, entry.handler))
        .collect();
    if !failing_writes.is_empty() {
        let _ = writeln!(
            out.text,
            "storage_faults_max=1 (a COMMIT may fail) for {}",
            failing_writes.join(", ")
        );
    }
    let limited: Vec<String> = models::handlers()
        .iter()
        .filter_map(|entry| {
            let limit_ms = entry.invocation_limit_ms?;
            Some(format!(
                "{}/{} ({limit_ms} ms)",
                entry.domain, entry.handler
            ))
        })
        .collect();
    if !limited.is_empty() {
        let _ = writeln!(
            out.text,
            "invocation_limit_ms (the platform's limit) for {}",
            limited.join(", ")
        );
    }
    out.text.push('\n');
    out.text
        .push_str(&report::matrix_within(&rows, width_chars));
    for row in &rows {
        out.text
            .push_str(&shortest_failure(row, &bounds_of(row.entry), width_chars));
    }
    out.text.push_str(&matrix_verdict(&rows));
    out.ending(exit_for(rows.iter().all(MatrixRow::as_declared)))
}

/// The matrix's closing line: every handler behaved as it declares (the correct ones clean,
/// the faulty ones caught, their VIOLATED rows above expected), or which did not.
fn matrix_verdict(rows: &[MatrixRow<'_>]) -> String {
    let (correct, faulty) =
        rows.iter()
            .fold((0, 0), |(correct, faulty), row| match row.entry.declared {
                models::Declared::Correct => (correct + 1, faulty),
                models::Declared::Faulty { .. } => (correct, faulty + 1),
            });
    let astray: Vec<String> = rows
        .iter()
        .filter(|row| !row.as_declared())
        .map(|row| format!("{}/{}", row.entry.domain, row.entry.handler))
        .collect();
    if astray.is_empty() {
        return format!(
            "\nas declared: all {} handlers ({correct} correct ones clean, {faulty} faulty ones \
             caught)\n",
            rows.len()
        );
    }
    format!(
        "\nNOT as declared: {} of {} handlers: {}\n",
        astray.len(),
        rows.len(),
        astray.join(", ")
    )
}

/// A faulty handler's shortest failing run for the invariant it declares, with the commands
/// that replay it shrunk and as first found; nothing for a handler not caught.
pub(super) fn shortest_failure(row: &MatrixRow<'_>, bounds: &Bounds, width_chars: usize) -> String {
    let models::Declared::Faulty { caught_by } = row.entry.declared else {
        return String::new();
    };
    let Some(shrunk) = shrink_first(&row.entry.build, bounds, &row.exploration, Some(caught_by))
    else {
        return String::new();
    };
    let seed = row.exploration.failure(caught_by).map(|found| found.seed);
    let mut out = format!(
        "\n== {}/{}: shortest failing run found for {caught_by}\n\n",
        row.entry.domain, row.entry.handler
    );
    out.push_str(&report::run_report_within(
        row.entry,
        &shrunk.bounds,
        &shrunk.outcome,
        width_chars,
    ));
    let _ = writeln!(
        out,
        "reproduce: {}",
        report::replay_command(
            row.entry,
            &shrunk.bounds,
            &Schedule::Tape(shrunk.tape.clone())
        )
    );
    if let Some(seed) = seed {
        let _ = writeln!(
            out,
            "original:  {}",
            report::replay_command(row.entry, bounds, &Schedule::Seed(seed))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Staging;

    /// A fresh scratch directory for one test, removed when dropped.
    fn scratch(name: &str) -> crate::process::ScratchDir {
        let path = std::env::temp_dir().join(format!("retrysim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        crate::process::ScratchDir::create(path).unwrap()
    }

    /// What a report directory held before is replaced whole, and nothing is left beside it.
    #[test]
    fn a_report_directory_is_replaced_whole() {
        let scratch = scratch("staging-replaced");
        let parent = scratch.path();
        let target = parent.join("report");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("stale.html"), "old").unwrap();
        let staging = Staging::beside(&target).unwrap();
        staging.write("index.html", "new").unwrap();
        assert!(
            target.join("stale.html").exists(),
            "untouched until in place"
        );
        staging.put_in_place().unwrap();
        assert_eq!(
            std::fs::read_to_string(target.join("index.html")).unwrap(),
            "new"
        );
        assert!(!target.join("stale.html").exists());
        let left: Vec<_> = std::fs::read_dir(parent).unwrap().collect();
        assert_eq!(left.len(), 1, "only the report: {left:?}");
    }

    /// A file that cannot be written is named, and the directory asked for is left as it was.
    #[test]
    fn a_file_that_cannot_be_written_is_named() {
        let scratch = scratch("staging-unwritable");
        let parent = scratch.path();
        let target = parent.join("report");
        let staging = Staging::beside(&target).unwrap();
        let error = staging.write("no-such-dir/page.html", "x").unwrap_err();
        assert!(error.0.contains("page.html"), "{}", error.0);
        assert!(!target.exists());
        assert_eq!(std::fs::read_dir(parent).unwrap().count(), 0);
    }
}
