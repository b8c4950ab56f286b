//! The sections of a scenario file that say where its ground truth is and how its answers
//! and lookups read: `[database]`, `[provider]`, `[pending]`, `[status]` and
//! `[conformance]`.

use super::TransportFile;
use crate::postgres::RelayPoints;
use crate::service::StatusTool;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DatabaseSection {
    #[serde(default)]
    pub(super) kind: DatabaseKindFile,
    pub(super) env: Option<String>,
    pub(super) effect_tables: Vec<String>,
    /// PostgreSQL: where the relay asks (`transactions`, the default; `statements`; `none`).
    pub(super) points: Option<PointsFile>,
    /// PostgreSQL: the scheme of the `DATABASE_URL` the server gets (`postgresql` unless
    /// said: `postgresql+psycopg` for SQLAlchemy).
    pub(super) url_scheme: Option<String>,
}

/// `[database] points`: the points a PostgreSQL server's transactions give with no helper.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum PointsFile {
    Transactions,
    Statements,
    None,
}

/// `[database] kind`: the server's SQLite file (the default), or a PostgreSQL database the
/// harness runs.
#[derive(Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum DatabaseKindFile {
    #[default]
    Sqlite,
    Postgres,
}

impl DatabaseSection {
    /// The relay's points: `transactions` unless the file says otherwise, on PostgreSQL
    /// only.
    pub(super) fn relay_points(&self) -> Result<Option<RelayPoints>, String> {
        match (self.kind, self.points) {
            (DatabaseKindFile::Sqlite, Some(_)) => Err("database.points is for PostgreSQL (kind                  = \"postgres\"): a SQLite server's points are the helper's"
                .into()),
            (DatabaseKindFile::Sqlite, None) | (_, Some(PointsFile::None)) => Ok(None),
            (DatabaseKindFile::Postgres, None | Some(PointsFile::Transactions)) => {
                Ok(Some(RelayPoints::Transactions))
            }
            (DatabaseKindFile::Postgres, Some(PointsFile::Statements)) => {
                Ok(Some(RelayPoints::Statements))
            }
        }
    }

    /// The variable that tells the server where its database is: as the file names it,
    /// else `DATABASE_URL` for PostgreSQL; SQLite's has no default.
    pub(super) fn env(&self) -> Result<&str, String> {
        match (&self.env, self.kind) {
            (Some(env), _) => Ok(env),
            (None, DatabaseKindFile::Postgres) => Ok("DATABASE_URL"),
            (None, DatabaseKindFile::Sqlite) => Err("database.env is missing: name the \
                 variable that gives the server its SQLite file's path (e.g. env = \
                 \"RETRYSIM_DB\")"
                .into()),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProviderSection {
    pub(super) env: String,
}

/// `[pending]`: how a tool's answer says "in progress, try later".
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PendingSection {
    pub(super) pointer: String,
    pub(super) equals: Value,
    pub(super) retry_after_ms: Option<String>,
}

/// `[conformance]`: the standards the check probes the server for.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConformanceSection {
    pub(super) idempotency_key: ConformanceAskedFile,
}

/// `[conformance] idempotency_key`: advisory, or required.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum ConformanceAskedFile {
    Advisory,
    Required,
}

/// `[status]`: how a reconnecting client asks what became of its request: an MCP tool and
/// the argument the request id goes in, or an HTTP `method` and `path` with `{key}` where
/// the request id goes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatusSection {
    pub(super) tool: Option<String>,
    pub(super) key_argument: Option<String>,
    pub(super) method: Option<String>,
    pub(super) path: Option<String>,
}

impl StatusSection {
    /// The status lookup over `transport`; an error names what that transport does not
    /// take, or what it lacks.
    pub(super) fn lookup(&self, transport: TransportFile) -> Result<StatusTool, String> {
        if transport.speaks_mcp() {
            if self.method.is_some() || self.path.is_some() {
                return Err(
                    "[status] method and path are HTTP's: over MCP it names its tool \
                            and key_argument"
                        .into(),
                );
            }
            let (Some(tool), Some(key_argument)) = (&self.tool, &self.key_argument) else {
                return Err(
                    "[status] names its tool and key_argument (the argument the \
                            request id goes in)"
                        .into(),
                );
            };
            return Ok(StatusTool {
                tool: tool.clone(),
                key_argument: key_argument.clone(),
            });
        }
        if self.tool.is_some() || self.key_argument.is_some() {
            return Err(
                "[status] tool and key_argument are MCP's: over HTTP it names its \
                        path (with {key} where the request id goes) and method"
                    .into(),
            );
        }
        let path = self.path.as_deref().ok_or(
            "[status] names its path, with {key} where the request id goes (e.g. path = \
             \"/requests/{key}\")",
        )?;
        if !path.starts_with('/') || !path.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(format!(
                "[status] path = {path:?} must start with / and hold only visible ASCII \
                 characters"
            ));
        }
        if !path.contains(STATUS_KEY_MARK) {
            return Err(format!(
                "[status] path = {path:?} has no {STATUS_KEY_MARK}: say where the request id \
                 goes"
            ));
        }
        let method = self.method.clone().unwrap_or_else(|| "GET".into());
        if method.is_empty() || !method.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(format!(
                "[status] method = {method:?} is not an HTTP method"
            ));
        }
        Ok(StatusTool {
            tool: format!("{method} {path}"),
            key_argument: String::new(),
        })
    }
}

/// Where an HTTP status lookup's path takes the request id.
pub(in crate::service) const STATUS_KEY_MARK: &str = "{key}";

/// `[database] url_scheme`, checked: PostgreSQL's, `postgresql` or `postgresql+DRIVER`.
pub(super) fn url_scheme(kind: Option<DatabaseKindFile>, scheme: &str) -> Result<String, String> {
    if kind != Some(DatabaseKindFile::Postgres) {
        return Err(
            "database.url_scheme is PostgreSQL's (kind = \"postgres\"): a SQLite \
                    server gets its file's path"
                .into(),
        );
    }
    let driver = scheme
        .strip_prefix("postgresql")
        .and_then(|rest| match rest {
            "" => Some(""),
            rest => rest.strip_prefix('+'),
        });
    let named = |driver: &str| {
        driver
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    match driver {
        Some(driver) if named(driver) => Ok(scheme.to_string()),
        _ => Err(format!(
            "database.url_scheme = {scheme:?}: give postgresql, or postgresql+DRIVER (e.g. \
             postgresql+psycopg, postgresql+asyncpg)"
        )),
    }
}
