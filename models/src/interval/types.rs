//! The interval domain's requests, results and events.

use retrysim_sim::Request;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// The tool revision in every receipt key.
pub const TOOL: &str = "set_interval.v1";
/// The scope a principal needs to change an automation.
pub const WRITE_SCOPE: &str = "automation:write";
/// The refusal for a principal without the write scope.
pub const NOT_PERMITTED: &str = "write not permitted";
/// The refusal for an automation missing from the principal's workspace.
pub const UNAVAILABLE: &str = "resource unavailable";
/// The refusal for a stale expected version.
pub const VERSION_CONFLICT: &str = "version conflict; reload before a new intent";

/// Who is calling, as trusted authentication says: never taken from the tool arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    /// The user.
    pub user_id: &'static str,
    /// The workspace the user acts in.
    pub workspace_id: &'static str,
}

/// An identity with its current scopes, resolved when the request is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Principal {
    /// Who.
    pub identity: Identity,
    /// The scopes granted right now.
    pub scopes: &'static [&'static str],
}

impl Principal {
    /// Whether the principal may change automations.
    pub fn can_write(&self) -> bool {
        self.scopes.contains(&WRITE_SCOPE)
    }
}

/// One tool argument as it arrives (JSON-like): only integers and text are valid where an
/// integer or text is expected, so `true` is not the integer 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arg {
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Text(Cow<'static, str>),
    /// Absent or null.
    Null,
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Int(value) => write!(f, "{value}"),
            Arg::Bool(value) => write!(f, "{value}"),
            Arg::Text(value) => write!(f, "{value:?}"),
            Arg::Null => f.write_str("null"),
        }
    }
}

/// The arguments of `set_interval`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolArgs {
    /// The client's request id, chosen before the first send.
    pub request_id: Arg,
    /// The automation to change.
    pub automation_id: Arg,
    /// The version the edit is based on.
    pub expected_version: Arg,
    /// The new interval in minutes.
    pub interval_minutes: Arg,
}

impl ToolArgs {
    /// Well-typed arguments.
    pub fn new(request_id: &'static str, automation_id: i64, version: i64, minutes: i64) -> Self {
        ToolArgs {
            request_id: Arg::Text(Cow::Borrowed(request_id)),
            automation_id: Arg::Int(automation_id),
            expected_version: Arg::Int(version),
            interval_minutes: Arg::Int(minutes),
        }
    }
}

/// A `set_interval` call: the caller's identity and the tool arguments.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IntervalRequest {
    /// The trusted caller.
    pub identity: Identity,
    /// The arguments.
    pub args: ToolArgs,
}

/// The scoped key of a receipt: (workspace, user, tool, request id).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopedKey {
    /// The caller's workspace.
    pub workspace_id: &'static str,
    /// The caller.
    pub user_id: &'static str,
    /// The request id text.
    pub request_id: String,
}

impl fmt::Display for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{TOOL}/{}",
            self.workspace_id, self.user_id, self.request_id
        )
    }
}

impl Request for IntervalRequest {
    type Key = ScopedKey;

    fn key(&self) -> ScopedKey {
        ScopedKey {
            workspace_id: self.identity.workspace_id,
            user_id: self.identity.user_id,
            request_id: self.request_id().to_string(),
        }
    }

    fn request_id(&self) -> &str {
        match &self.args.request_id {
            Arg::Text(text) => text,
            _ => "",
        }
    }

    fn with_fresh_id(&self, generation: u32) -> Self {
        let fresh = format!("{}-r{generation}", self.request_id());
        IntervalRequest {
            identity: self.identity,
            args: ToolArgs {
                request_id: Arg::Text(Cow::Owned(fresh)),
                ..self.args.clone()
            },
        }
    }

    fn describe(&self) -> String {
        let args = &self.args;
        format!(
            "{}@{} {} #{} v{}->{}m",
            self.identity.user_id,
            self.identity.workspace_id,
            self.request_id(),
            args.automation_id,
            args.expected_version,
            args.interval_minutes
        )
    }
}

/// The result of an applied edit: the automation right after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EditResult {
    /// The automation.
    pub id: i64,
    /// Its interval after the edit.
    pub interval_minutes: i64,
    /// Its version after the edit.
    pub version: i64,
}

impl fmt::Display for EditResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{\"id\":{},\"interval_minutes\":{},\"version\":{}}}",
            self.id, self.interval_minutes, self.version
        )
    }
}

/// An administrator's change, which the schedule may interleave with the clients' attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdminEvent {
    /// Remove a user's write scope.
    Revoke {
        /// The user.
        user_id: &'static str,
    },
    /// Move an automation to another workspace.
    Move {
        /// The automation.
        automation_id: i64,
        /// Its new workspace.
        workspace_id: &'static str,
    },
    /// Delete an automation.
    Delete {
        /// The automation.
        automation_id: i64,
    },
}

impl fmt::Display for AdminEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminEvent::Revoke { user_id } => write!(f, "revoke {WRITE_SCOPE} from {user_id}"),
            AdminEvent::Move {
                automation_id,
                workspace_id,
            } => write!(f, "move #{automation_id} to {workspace_id}"),
            AdminEvent::Delete { automation_id } => write!(f, "delete #{automation_id}"),
        }
    }
}
