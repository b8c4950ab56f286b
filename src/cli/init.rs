//! `retrysim init`: a first scenario for an HTTP service, written from a few answers (or the
//! service's OpenAPI document), then checked once.

use super::UsageError;
use crate::service::{first_scenario, DatabaseKind, ServiceAnswers};
use clap::{Args, ValueEnum};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What `init` is asked.
#[derive(Args)]
pub(super) struct InitArgs {
    /// Where the service serves its OpenAPI document (FastAPI: /openapi.json): its first
    /// POST that takes an Idempotency-Key header becomes the call.
    #[arg(long, value_name = "PATH")]
    openapi: Option<String>,
    /// The endpoint to call instead, e.g. "POST /orders".
    #[arg(long, value_name = "METHOD /PATH")]
    endpoint: Option<String>,
    /// The call's JSON body (else one built from the OpenAPI document's schema, or {}).
    #[arg(long, value_name = "JSON")]
    body: Option<String>,
    /// The tables whose rows are the service's effects, comma-separated.
    #[arg(long, value_name = "TABLES", value_delimiter = ',', required = true)]
    effect_tables: Vec<String>,
    /// Its database: a SQLite file it is given in $RETRYSIM_DB, or a throwaway PostgreSQL
    /// it is given in $DATABASE_URL.
    #[arg(long, value_enum, default_value_t = DatabaseArg::Sqlite)]
    database: DatabaseArg,
    /// A variable to give the service, NAME=VALUE (again for more).
    #[arg(long, value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// The scenario file to write; it must not exist. The service's command runs in its
    /// directory.
    #[arg(long, default_value = "retrysim.toml")]
    out: PathBuf,
    /// The service serves requests at once (threads, async): two may be in flight.
    #[arg(long)]
    concurrent: bool,
    /// Write the file without checking it.
    #[arg(long)]
    no_check: bool,
    /// The command that starts the service, after `--` (e.g. `-- python3 app.py`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// `--database`.
#[derive(Clone, Copy, ValueEnum)]
enum DatabaseArg {
    Sqlite,
    Postgres,
}

impl InitArgs {
    /// Whether the file is to be checked once written.
    pub(super) fn checks(&self) -> bool {
        !self.no_check
    }
}

/// Writes the scenario `args` describe; its path. Nothing is written on an error.
pub(super) fn write_first_scenario(args: &InitArgs) -> Result<String, UsageError> {
    if args.out.exists() {
        return Err(UsageError(format!(
            "{} exists: name another file with --out (init writes a new one)",
            args.out.display()
        )));
    }
    let body = (args.body.as_deref())
        .map(|text| {
            serde_json::from_str(text)
                .map_err(|error| UsageError(format!("--body is no JSON: {error}")))
        })
        .transpose()?;
    let env = (args.env.iter())
        .map(|pair| {
            (pair.split_once('='))
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .ok_or_else(|| UsageError(format!("--env {pair:?}: give NAME=VALUE")))
        })
        .collect::<Result<_, _>>()?;
    let answers = ServiceAnswers {
        command: args.command.clone(),
        env,
        database: match args.database {
            DatabaseArg::Sqlite => DatabaseKind::Sqlite,
            DatabaseArg::Postgres => DatabaseKind::Postgres,
        },
        effect_tables: args.effect_tables.clone(),
        endpoint: args.endpoint.clone(),
        body,
        openapi: args.openapi.clone(),
        concurrent: args.concurrent,
    };
    let directory = match args.out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let text = first_scenario(&answers, &directory).map_err(UsageError)?;
    write_new(&args.out, &text)?;
    Ok(args.out.display().to_string())
}

/// Writes `text` to `path`, which must not exist, whole or not at all.
fn write_new(path: &Path, text: &str) -> Result<(), UsageError> {
    let failed = |error: std::io::Error| {
        UsageError(format!("{} cannot be written: {error}", path.display()))
    };
    let mut file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(failed)?;
    if let Err(error) = file.write_all(text.as_bytes()) {
        let _ = std::fs::remove_file(path);
        return Err(failed(error));
    }
    Ok(())
}
