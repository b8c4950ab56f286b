//! A scenario file: what `retrysim check SCENARIO` checks of a server, in TOML.
//!
//! ```toml
//! [server]
//! command = ["python3", "counter_server.py"]   # run in the scenario file's directory
//! env = { KEYED = "1" }
//! answer_wait_ms = 10000                       # the bound on every wait for the server
//! reuse = true                                 # one process for run after run
//! spare = false                                # true: a process started ahead, held
//!                                              # at the helper's import until a
//!                                              # crash needs it (fast restarts)
//! concurrent = false                           # true: it serves calls at once, so
//!                                              # two calls are in flight at once
//!                                              # (invocations_max 2 unless set)
//! clock = "harness"                            # it reads time only through now_ms(),
//!                                              # or none; "own" (the default): its own
//! transport = "stdio"                         # or "http": a plain HTTP endpoint on
//!                                              # 127.0.0.1 at the port in $PORT
//!                                              # (port_env), each call { method,
//!                                              # path, body }, its key in the
//!                                              # Idempotency-Key header; or
//!                                              # "streamable-http": MCP POSTed to
//!                                              # endpoint = "/mcp" at $PORT
//!
//! [database]                                   # the ground truth (and with a
//!                                              # [provider], its charges' records;
//!                                              # a [provider] alone will do)
//! env = "RETRYSIM_DB"                          # the variable that names the file
//! effect_tables = ["counter"]                  # changes to these are the effects
//! points = "transactions"                      # PostgreSQL: points at each transaction's
//!                                              # first statement and commit, with no
//!                                              # helper ("statements": every statement
//!                                              # too; "none")
//!
//! key = { argument = "request_id" }            # or { meta = "idempotencyKey" },
//!                                              # "idempotencyKey", or "none"
//! value = "/structuredContent/total"           # the answer's value, a JSON pointer
//!
//! [pending]                                    # how an answer says "in progress" (a
//! pointer = "/structuredContent/status"        # result or a tool error): the value
//! equals = "in_progress"                       # here is this; retry after the ms at
//! retry_after_ms = "/structuredContent/wait_ms" # this pointer, when it is a number
//!
//! [status]                                     # asked by a reconnecting client: an MCP
//! tool = "status"                              # tool and the argument its request id
//! key_argument = "request_id"                  # goes in; over HTTP method = "GET" and
//!                                              # path = "/requests/{key}"
//!
//! [[client]]
//! calls = [{ tool = "add", arguments = { amount = { one_of = [5, 7] } } },
//!          { tool = "add", arguments = { amount = 9 }, key_of = 1 },  # call 1's key
//!                                              # reused with other arguments
//!          { tool = "add", arguments = { amount = "{1:/structuredContent/total}" } },
//!                                              # a value from the answer to call 1
//!          { tool = "total", read = true }]    # a read: owed no effect, sent without
//!                                              # a key (an HTTP GET is one unless it
//!                                              # says read = false)
//!
//! [bounds]                                     # defaults for the command line's flags
//! attempts_max = 2
//! faults_max = 1
//! preemptions_max = 1                          # switches between requests in the server
//!                                              # (none unless set)
//! ```
//!
//! Every field is checked: an unknown one, a missing one, or a value of the wrong kind is
//! an error of one line that names it.

mod bounds;
mod sections;

use super::answers;
use super::headers::{HeadersFile, HEADERS_OF_THE_HARNESS};
use super::{
    Call, ConformanceAsked, DatabaseKind, KeyPlacement, PendingAnswer, ServerClock, ServerCommand,
    ServerTransport, ServiceTarget, SIDE_CHANNEL_ENV,
};
use crate::Bounds;
use bounds::BoundsSection;
pub(super) use sections::STATUS_KEY_MARK;
use sections::{
    url_scheme, ConformanceAskedFile, ConformanceSection, DatabaseKindFile, DatabaseSection,
    PendingSection, ProviderSection, StatusSection,
};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The wait bound on a server when the scenario names none, in milliseconds.
pub const ANSWER_WAIT_MS_DEFAULT: u64 = 10_000;

/// The longest scenario file read, in bytes.
pub const SCENARIO_BYTES_MAX: u64 = 1 << 20;

/// The JSON pointer to an answer's value when the scenario names none: the whole structured
/// content.
pub const VALUE_POINTER_DEFAULT: &str = "/structuredContent";

/// A loaded scenario: the target to check and the bounds its file sets.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file's path, as given.
    pub path: PathBuf,
    /// What to check.
    pub target: ServiceTarget,
    /// The bounds the file sets over [`Bounds::default`], the workload's size for the
    /// clients and intents it does not set.
    pub bounds: Bounds,
}

/// Why a scenario file cannot be used: one line that names the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

/// `value` as written: one JSON pointer, or several, whose values make the answer's value
/// together (a JSON array of them, in the order given).
#[derive(Deserialize)]
#[serde(untagged)]
enum ValueFile {
    One(String),
    Several(Vec<String>),
}

impl ValueFile {
    fn pointers(&self) -> Vec<String> {
        match self {
            ValueFile::One(pointer) => vec![pointer.clone()],
            ValueFile::Several(pointers) => pointers.clone(),
        }
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    server: ServerSection,
    database: Option<DatabaseSection>,
    provider: Option<ProviderSection>,
    key: Option<KeyPlacementFile>,
    value: Option<ValueFile>,
    pending: Option<PendingSection>,
    status: Option<StatusSection>,
    conformance: Option<ConformanceSection>,
    #[serde(rename = "client")]
    clients: Vec<ClientSection>,
    #[serde(default)]
    bounds: BoundsSection,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    command: Vec<String>,
    #[serde(default)]
    transport: TransportFile,
    port_env: Option<String>,
    endpoint: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    answer_wait_ms: Option<u64>,
    reuse: Option<bool>,
    spare: Option<bool>,
    concurrent: Option<bool>,
    clock: Option<ClockFile>,
    /// HTTP: headers every call sends.
    headers: Option<HeadersFile>,
    /// HTTP: a path the server answers `GET` with a 2xx once it is ready.
    ready: Option<String>,
}

/// `transport` under `[server]`: how the harness speaks to the server.
#[derive(Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum TransportFile {
    /// MCP over stdio.
    #[default]
    Stdio,
    /// Plain HTTP.
    Http,
    /// MCP over Streamable HTTP.
    StreamableHttp,
}

impl TransportFile {
    /// Whether calls are MCP's `tools/call`s (else HTTP requests).
    fn speaks_mcp(self) -> bool {
        self != TransportFile::Http
    }

    /// Whether the server listens on a port the harness gives it.
    fn listens(self) -> bool {
        self != TransportFile::Stdio
    }
}

/// `clock` under `[server]`: whose clock the server reads.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum ClockFile {
    Harness,
    Own,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientSection {
    calls: Vec<CallSection>,
    /// HTTP: headers each of the client's calls sends.
    headers: Option<HeadersFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallSection {
    /// An MCP tool's name.
    tool: Option<String>,
    /// MCP: the tool's arguments.
    arguments: Option<Value>,
    /// HTTP: the request's method (`POST` unless said).
    method: Option<String>,
    /// HTTP: the request's path.
    path: Option<String>,
    /// HTTP: the request's JSON body.
    body: Option<Value>,
    /// The 1-based number of an earlier call of the same client whose request id this one
    /// is sent under.
    key_of: Option<usize>,
    /// HTTP: headers the call sends.
    headers: Option<HeadersFile>,
    /// Whether the call only reads (an HTTP `GET`, `HEAD` or `OPTIONS` does unless it says).
    read: Option<bool>,
}

#[derive(Deserialize)]
enum KeyPlacementFile {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "argument")]
    Argument(String),
    #[serde(rename = "meta")]
    Meta(String),
    #[serde(rename = "idempotencyKey")]
    IdempotencyKey,
    #[serde(rename = "header")]
    Header(String),
}

fn no_arguments() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Refuses `key_of` on a read, or naming one: a read is sent without a key.
fn check_read_key(
    at: &str,
    call: &CallSection,
    calls: &[CallSection],
    transport: TransportFile,
) -> Result<(), String> {
    let Some(number) = call.key_of else {
        return Ok(());
    };
    if call.reads(transport) {
        return Err(format!(
            "{at}: key_of on a read: a read is sent without a key (say read = false if \
             the call is an operation)"
        ));
    }
    if calls[number - 1].reads(transport) {
        return Err(format!(
            "{at}: key_of = {number} names a read, which has no key (say read = false on \
             call {number} if it is an operation)"
        ));
    }
    Ok(())
}

/// Refuses a key header whose name is no HTTP field name (RFC 9110 §5.1: a token) or is one
/// the harness writes itself (a second `Content-Length` would make the request another).
fn check_key_header(name: &str) -> Result<(), String> {
    let token_char = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token_char) {
        return Err(format!(
            "key = {{ header = {name:?} }} is no HTTP header name (letters, digits and \
             !#$%&'*+-.^_`|~ only)"
        ));
    }
    if HEADERS_OF_THE_HARNESS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "key = {{ header = {name:?} }}: the harness writes that header itself; name \
             another (Idempotency-Key is the default)"
        ));
    }
    Ok(())
}

/// The longest a scenario may have the harness wait for one answer of the server's, in
/// milliseconds of real time: one hour.
pub const ANSWER_WAIT_MS_MAX: u64 = 3_600_000;

/// The header an HTTP client sends its key in unless the scenario says otherwise.
pub const KEY_HEADER_DEFAULT: &str = "Idempotency-Key";

/// The variable that gives an HTTP server its port unless the scenario says otherwise.
pub const PORT_ENV_DEFAULT: &str = "PORT";

/// The HTTP methods RFC 9110 calls safe: a call with one of them is a read unless it says
/// `read = false`.
const SAFE_METHODS: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

impl CallSection {
    /// Whether the call is a read: as it says, else whether it is an HTTP call with a safe
    /// method.
    fn reads(&self, transport: TransportFile) -> bool {
        self.read.unwrap_or_else(|| {
            transport == TransportFile::Http
                && SAFE_METHODS.contains(&self.method.as_deref().unwrap_or("POST"))
        })
    }

    /// What the call is, as the timeline and the workload name it: the tool over MCP,
    /// `METHOD /path` over HTTP; and its arguments (the body over HTTP). An error names
    /// what the transport does not take, or what it lacks.
    fn named(&self, transport: TransportFile) -> Result<(String, Value), String> {
        match transport {
            TransportFile::Stdio | TransportFile::StreamableHttp => {
                if self.method.is_some() || self.path.is_some() || self.body.is_some() {
                    return Err(
                        "method, path and body are an HTTP call's: over MCP a call names \
                         its tool and arguments"
                            .into(),
                    );
                }
                let tool = self.tool.clone().ok_or("a call names its tool")?;
                Ok((tool, self.arguments.clone().unwrap_or_else(no_arguments)))
            }
            TransportFile::Http => {
                if self.tool.is_some() || self.arguments.is_some() {
                    return Err(
                        "tool and arguments are an MCP call's: an HTTP call names its \
                         method, path and body"
                            .into(),
                    );
                }
                let path = self.path.clone().ok_or("an HTTP call names its path")?;
                if !path.starts_with('/') || !path.bytes().all(|byte| byte.is_ascii_graphic()) {
                    return Err(format!(
                        "path = {path:?} must start with / and hold only visible ASCII \
                         characters: no spaces, no control characters (percent-encode others)"
                    ));
                }
                let method = self.method.clone().unwrap_or_else(|| "POST".into());
                if method.is_empty() || !method.chars().all(|c| c.is_ascii_uppercase()) {
                    return Err(format!("method = {method:?} is not an HTTP method"));
                }
                Ok((
                    format!("{method} {path}"),
                    self.body.clone().unwrap_or_else(no_arguments),
                ))
            }
        }
    }
}

impl Scenario {
    /// Reads and checks the scenario at `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        use std::io::Read as _;
        let name = path.display();
        let failed = |error: std::io::Error| ScenarioError(format!("scenario {name}: {error}"));
        // Looked at before it is opened: opening a FIFO would wait for a writer for ever.
        if !std::fs::metadata(path).map_err(failed)?.is_file() {
            return Err(ScenarioError(format!(
                "scenario {name}: not a regular file"
            )));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| file.take(SCENARIO_BYTES_MAX + 1).read_to_end(&mut bytes))
            .map_err(failed)?;
        if bytes.len() as u64 > SCENARIO_BYTES_MAX {
            return Err(ScenarioError(format!(
                "scenario {name}: longer than {SCENARIO_BYTES_MAX} bytes, the cap on a scenario file"
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| ScenarioError(format!("scenario {name}: not UTF-8 text")))?;
        Scenario::parse(path, &text)
    }

    /// Checks `text`, the scenario at `path` (whose directory the server runs in).
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let name = path.display();
        let file: ScenarioFile = toml::from_str(text).map_err(|error| {
            let message = error.message().trim().replace('\n', " ");
            let line = error
                .span()
                .map(|span| format!(" (line {})", text[..span.start].lines().count().max(1)))
                .unwrap_or_default();
            ScenarioError(format!("scenario {name}{line}: {message}"))
        })?;
        let directory = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let invalid = |why: String| ScenarioError(format!("scenario {name}: {why}"));
        file.validate().map_err(invalid)?;
        let target = file.target(directory).map_err(invalid)?;
        let bounds = file.bounds.over(&target).map_err(invalid)?;
        bounds.validate().map_err(|error| {
            let field = match error.field() {
                "clients_max" => "clients",
                "intents_max" => "intents",
                field => field,
            };
            invalid(format!("bounds.{field} {}", error.problem()))
        })?;
        if bounds.invocations_max > 1 && !target.concurrent {
            return Err(invalid(format!(
                "bounds.invocations_max is {}, but the server is not declared to serve calls \
                 at once: say concurrent = true under [server] if it does",
                bounds.invocations_max
            )));
        }
        Ok(Scenario {
            path: path.to_path_buf(),
            target,
            bounds,
        })
    }

    /// The tools the scenario calls: every client's, then the status tool.
    pub fn tools(&self) -> Vec<&str> {
        let mut tools: Vec<&str> = Vec::new();
        let named = self
            .target
            .clients
            .iter()
            .flatten()
            .map(|c| c.tool.as_str());
        for tool in named.chain(self.target.status.iter().map(|s| s.tool.as_str())) {
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
        tools
    }
}

impl ScenarioFile {
    /// The checks of fields that the file's grammar lets through: each mistake is one line
    /// naming the field, found before any server runs.
    fn validate(&self) -> Result<(), String> {
        if self.server.answer_wait_ms == Some(0) {
            return Err(
                "server.answer_wait_ms is 0: every answer would be too late; give the \
                 milliseconds of real time to wait for one"
                    .into(),
            );
        }
        if let Some(wait_ms) = self
            .server
            .answer_wait_ms
            .filter(|&ms| ms > ANSWER_WAIT_MS_MAX)
        {
            return Err(format!(
                "server.answer_wait_ms is {wait_ms}: at most {ANSWER_WAIT_MS_MAX} (one hour); \
                 a server that takes longer to answer is taken for one that never will"
            ));
        }
        for name in self.server.env.keys() {
            env_name("server.env", name)?;
        }
        self.check_headers()?;
        if let Some(database) = &self.database {
            env_name("database.env", database.env()?)?;
            env_set_by_harness("database.env", database.env()?)?;
            let mut listed = BTreeSet::new();
            for table in &database.effect_tables {
                if !listed.insert(table) {
                    return Err(format!("database.effect_tables lists `{table}` twice"));
                }
            }
        }
        if let Some(provider) = &self.provider {
            env_name("provider.env", &provider.env)?;
            env_set_by_harness("provider.env", &provider.env)?;
        }
        let harness_names = [
            Some((SIDE_CHANNEL_ENV, "the side channel's")),
            self.provider
                .as_ref()
                .map(|provider| (provider.env.as_str(), "provider.env's")),
        ];
        if let Some(database) = &self.database {
            if let Some((_, whose)) = harness_names
                .iter()
                .flatten()
                .find(|(name, _)| Ok(*name) == database.env())
            {
                return Err(format!(
                    "database.env is {:?}, {whose} variable too: give the database a name of its own",
                    database.env()?
                ));
            }
        }
        if self.server.transport.listens() {
            let port_env = self.server.port_env.as_deref().unwrap_or(PORT_ENV_DEFAULT);
            let database = self
                .database
                .as_ref()
                .and_then(|d| d.env().ok())
                .map(|env| (env, "database.env's"));
            if let Some((_, whose)) = harness_names
                .iter()
                .chain(&[database])
                .flatten()
                .find(|(name, _)| *name == port_env)
            {
                return Err(format!(
                    "server.port_env is {port_env:?}, {whose} variable too: give the port a \
                     name of its own"
                ));
            }
        }
        let pending = self.pending.as_ref();
        let values = self
            .value
            .as_ref()
            .map_or_else(Vec::new, ValueFile::pointers);
        if matches!(&self.value, Some(ValueFile::Several(pointers)) if pointers.is_empty()) {
            return Err(
                "value = [] names no field: give one JSON pointer, or several (value = \
                 [\"/body/item\", \"/body/quantity\"])"
                    .into(),
            );
        }
        let pointers = values.iter().map(|p| ("value", Some(p.as_str()))).chain([
            ("pending.pointer", pending.map(|p| p.pointer.as_str())),
            (
                "pending.retry_after_ms",
                pending.and_then(|p| p.retry_after_ms.as_deref()),
            ),
        ]);
        for (field, pointer) in pointers {
            if let Some(value) = pointer.filter(|p| !p.is_empty() && !p.starts_with('/')) {
                return Err(format!(
                    "{field} = {value:?} is not a JSON pointer: a pointer starts with `/` \
                     (\"/{value}\"), or is \"\" for the whole result"
                ));
            }
        }
        let transport = self.server.transport;
        for (client, section) in self.clients.iter().enumerate() {
            for (call, section) in section.calls.iter().enumerate() {
                let numbered = format!("client {} call {}", client + 1, call + 1);
                let (name, arguments) = section
                    .named(transport)
                    .map_err(|why| format!("{numbered}: {why}"))?;
                let at = format!("{numbered} (`{name}`)");
                let field = if transport.speaks_mcp() {
                    "arguments"
                } else {
                    "body"
                };
                if !arguments.is_object() {
                    return Err(format!(
                        "{at}: {field} = {arguments} is not a table of named {field}",
                    ));
                }
                if section
                    .key_of
                    .is_some_and(|number| number == 0 || number > call)
                {
                    return Err(format!(
                        "{at}: key_of = {} names no earlier call of its client (calls count \
                         from 1)",
                        section.key_of.unwrap_or(0)
                    ));
                }
                check_read_key(&at, section, &self.clients[client].calls, transport)?;
                let headers = super::headers::merged(&[
                    self.server.headers.as_ref(),
                    self.clients[client].headers.as_ref(),
                    section.headers.as_ref(),
                ]);
                let mut references = answers::references(&name);
                references.extend(answers::references_in(&arguments));
                references.extend(answers::references_in(&headers));
                answers::check(&at, call + 1, &references)?;
                empty_choice(&arguments).map_or(Ok(()), |path| {
                    Err(format!(
                        "{at}: {field}{path} is one_of = []: give it at least one value"
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// The database the invariants are judged from, `None` when the provider's record is
    /// the only ground truth; an error when there is neither, or when a process is to be
    /// reused without a database to put back between runs.
    fn ground_truth(&self) -> Result<Option<&DatabaseSection>, String> {
        match (&self.database, &self.provider) {
            (Some(database), _) => Ok(Some(database)),
            (None, None) => Err("no [database] and no [provider]: name the server's SQLite \
                 file's variable (env) and its effect_tables, or a [provider], the ground truth \
                 the invariants are judged from (what a server answers is never the judge)"
                .into()),
            (None, Some(_)) if self.server.reuse == Some(true) => Err("server.reuse = true \
                 needs a [database]: without one the harness cannot put the server's state \
                 back between runs, so each run starts a fresh process"
                .into()),
            (None, Some(_)) => Ok(None),
        }
    }

    /// How the harness speaks to the server.
    fn transport(&self) -> ServerTransport {
        match self.server.transport {
            TransportFile::Stdio => ServerTransport::Stdio,
            TransportFile::Http => ServerTransport::Http {
                port_env: (self.server.port_env.clone()).unwrap_or_else(|| PORT_ENV_DEFAULT.into()),
                ready: self.server.ready.clone(),
            },
            TransportFile::StreamableHttp => ServerTransport::StreamableHttp {
                port_env: (self.server.port_env.clone()).unwrap_or_else(|| PORT_ENV_DEFAULT.into()),
                endpoint: (self.server.endpoint.clone())
                    .unwrap_or_else(|| super::MCP_ENDPOINT_DEFAULT.into()),
            },
        }
    }

    /// Where the client's key goes: as the file says, else nowhere over stdio and in the
    /// `Idempotency-Key` header over HTTP. A place the transport has not is an error.
    fn key_placement(&self) -> Result<KeyPlacement, String> {
        let http = self.server.transport == TransportFile::Http;
        Ok(match (&self.key, http) {
            (None, false) | (Some(KeyPlacementFile::None), _) => KeyPlacement::None,
            (None, true) => KeyPlacement::Header(KEY_HEADER_DEFAULT.into()),
            (Some(KeyPlacementFile::Argument(name)), _) => KeyPlacement::Argument(name.clone()),
            (Some(KeyPlacementFile::Meta(name)), false) => KeyPlacement::Meta(name.clone()),
            (Some(KeyPlacementFile::IdempotencyKey), false) => KeyPlacement::IdempotencyKey,
            (Some(KeyPlacementFile::Header(name)), true) => {
                check_key_header(name)?;
                KeyPlacement::Header(name.clone())
            }
            (Some(KeyPlacementFile::Header(_)), false) => {
                return Err(
                    "key = { header = ... } is plain HTTP's: over MCP a key goes in \
                     an argument, _meta or idempotencyKey"
                        .into(),
                )
            }
            (Some(_), true) => {
                return Err("over HTTP a key goes in a header (key = { header = \
                     \"Idempotency-Key\" }, the default) or a body field (key = { argument = \
                     \"NAME\" })"
                    .into())
            }
        })
    }

    /// Checks the headers the file gives, which only an HTTP call sends.
    fn check_headers(&self) -> Result<(), String> {
        let key = match self.key_placement()? {
            KeyPlacement::Header(name) => Some(name),
            _ => None,
        };
        let mut given = vec![("server.headers", self.server.headers.as_ref())];
        for client in &self.clients {
            given.push(("client.headers", client.headers.as_ref()));
            given.extend(
                client
                    .calls
                    .iter()
                    .map(|call| ("calls.headers", call.headers.as_ref())),
            );
        }
        for (field, headers) in given {
            let Some(headers) = headers else { continue };
            if self.server.transport != TransportFile::Http {
                return Err(format!(
                    "{field} is for plain HTTP calls (transport = \"http\"): an MCP call has \
                     no headers of its own"
                ));
            }
            super::headers::check(field, headers, key.as_deref())?;
        }
        Ok(())
    }

    /// What `[conformance]` asks: over plain HTTP only, with the key in a header.
    fn conformance_asked(&self) -> Result<Option<ConformanceAsked>, String> {
        let Some(section) = &self.conformance else {
            return Ok(None);
        };
        if self.server.transport != TransportFile::Http {
            return Err(
                "[conformance] idempotency_key is plain HTTP's: say transport = \
                        \"http\""
                    .into(),
            );
        }
        if !matches!(self.key_placement()?, KeyPlacement::Header(_)) {
            return Err(
                "[conformance] idempotency_key probes the key's header: the key must \
                        go in one (key = { header = \"Idempotency-Key\" }, the default over \
                        HTTP)"
                    .into(),
            );
        }
        let first = self.clients.first().and_then(|client| client.calls.first());
        if first.is_some_and(|call| call.reads(self.server.transport)) {
            return Err(
                "[conformance] idempotency_key probes client 1's call 1, which is a read \
                 (sent without a key): put an operation first"
                    .into(),
            );
        }
        Ok(Some(match section.idempotency_key {
            ConformanceAskedFile::Advisory => ConformanceAsked::Advisory,
            ConformanceAskedFile::Required => ConformanceAsked::Required,
        }))
    }

    /// The target, its server run in `directory`.
    fn target(&self, directory: &Path) -> Result<ServiceTarget, String> {
        let Some((program, args)) = self.server.command.split_first() else {
            return Err("server.command is empty: name the program and its arguments".into());
        };
        let database = self.ground_truth()?;
        if database.is_some_and(|database| database.effect_tables.is_empty()) {
            return Err(
                "database.effect_tables is empty: name the tables whose changes are \
                        the effects"
                    .into(),
            );
        }
        if self.clients.is_empty() || self.clients.iter().any(|c| c.calls.is_empty()) {
            return Err("every [[client]] needs at least one call, and there must be one".into());
        }
        if !self.server.transport.listens() && self.server.port_env.is_some() {
            return Err(
                "server.port_env is an HTTP server's: say transport = \"http\" or \
                 \"streamable-http\" too"
                    .into(),
            );
        }
        match (&self.server.endpoint, self.server.transport) {
            (Some(_), transport) if transport != TransportFile::StreamableHttp => {
                return Err(
                    "server.endpoint is a Streamable HTTP server's: say transport = \
                     \"streamable-http\" too (a plain HTTP call names its own path)"
                        .into(),
                )
            }
            (Some(endpoint), _)
                if !endpoint.starts_with('/')
                    || !endpoint.bytes().all(|byte| byte.is_ascii_graphic()) =>
            {
                return Err(format!(
                    "server.endpoint = {endpoint:?} must start with / and hold only visible \
                     ASCII characters"
                ))
            }
            _ => {}
        }
        if let Some(ready) = &self.server.ready {
            if self.server.transport != TransportFile::Http {
                return Err(
                    "server.ready is a plain HTTP server's: say transport = \"http\" \
                            too"
                    .into(),
                );
            }
            if !ready.starts_with('/') || !ready.bytes().all(|byte| byte.is_ascii_graphic()) {
                return Err(format!(
                    "server.ready = {ready:?} must be a path: start with / and hold only \
                     visible ASCII characters"
                ));
            }
        }
        if let Some(port_env) = &self.server.port_env {
            env_name("server.port_env", port_env)?;
            env_set_by_harness("server.port_env", port_env)?;
        }
        Ok(ServiceTarget {
            server: ServerCommand {
                program: program_in(directory, program),
                args: args.to_vec(),
                env: self.server.env.clone().into_iter().collect(),
                working_dir: Some(directory.to_path_buf()),
                answer_wait_ms: self.server.answer_wait_ms.unwrap_or(ANSWER_WAIT_MS_DEFAULT),
            },
            database_env: database
                .map(|database| database.env().map(str::to_string))
                .transpose()?,
            database: match database.map(|database| database.kind) {
                Some(DatabaseKindFile::Postgres) => DatabaseKind::Postgres,
                Some(DatabaseKindFile::Sqlite) | None => DatabaseKind::Sqlite,
            },
            database_url_scheme: (database.and_then(|d| d.url_scheme.as_ref()))
                .map(|scheme| url_scheme(database.map(|d| d.kind), scheme))
                .transpose()?,
            database_points: database
                .map(DatabaseSection::relay_points)
                .transpose()?
                .flatten(),
            effect_tables: database
                .map_or_else(Vec::new, |database| database.effect_tables.clone()),
            provider_env: self.provider.as_ref().map(|provider| provider.env.clone()),
            key: self.key_placement()?,
            transport: self.transport(),
            pending: self.pending.as_ref().map(|pending| PendingAnswer {
                pointer: pending.pointer.clone(),
                equals: pending.equals.clone(),
                retry_after_ms: pending.retry_after_ms.clone(),
            }),
            value_pointers: self
                .value
                .as_ref()
                .map_or_else(|| vec![VALUE_POINTER_DEFAULT.into()], ValueFile::pointers),
            clients: self
                .clients
                .iter()
                .map(|client| {
                    client
                        .calls
                        .iter()
                        .map(|call| {
                            let (tool, arguments) = call
                                .named(self.server.transport)
                                .expect("calls checked at load");
                            let layers = [
                                self.server.headers.as_ref(),
                                client.headers.as_ref(),
                                call.headers.as_ref(),
                            ];
                            Call {
                                tool,
                                arguments,
                                key_of: call.key_of.map(|number| number - 1),
                                headers: super::headers::merged(&layers),
                                read: call.reads(self.server.transport),
                            }
                        })
                        .collect()
                })
                .collect(),
            conformance: self.conformance_asked()?,
            status: (self.status.as_ref())
                .map(|status| status.lookup(self.server.transport))
                .transpose()?,
            reuse: self.server.reuse.unwrap_or(database.is_some()),
            spare: self.server.spare.unwrap_or(false),
            fresh: super::FreshValues::default(),
            concurrent: self.server.concurrent.unwrap_or(false),
            clock: match self.server.clock {
                Some(ClockFile::Harness) => ServerClock::Harness,
                Some(ClockFile::Own) | None => ServerClock::Own,
            },
        })
    }
}

/// Checks that `name`, from `field`, can name an environment variable.
fn env_name(field: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(format!(
            "{field}: {name:?} cannot name an environment variable (empty, or with `=` or NUL)"
        ));
    }
    Ok(())
}

/// Variables a process needs from the environment it inherits, which the harness must not
/// set to a port, a path or an address in the server's place; and those it sets itself.
const ENV_NOT_FOR_THE_HARNESS: [&str; 16] = [
    "PATH",
    "HOME",
    "PWD",
    "SHELL",
    "USER",
    "LANG",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "PYTHONPATH",
    "NODE_PATH",
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    crate::process::HARNESS_ENV,
];

/// A variable `field` names, which the harness sets for the server: refused when the process
/// needs it for itself (`PATH`) or the harness sets it to something else already.
fn env_set_by_harness(field: &str, name: &str) -> Result<(), String> {
    if ENV_NOT_FOR_THE_HARNESS.contains(&name) {
        return Err(format!(
            "{field} is {name:?}, a variable the server's process needs for itself or the \
             harness sets already, which the harness would set in its place: give it a name \
             of its own"
        ));
    }
    Ok(())
}

/// Where in `arguments` a `{ one_of = [] }` is (`.amount`), if anywhere: a choice with no
/// value to draw.
fn empty_choice(arguments: &Value) -> Option<String> {
    match arguments {
        Value::Object(object) => {
            if let (1, Some(Value::Array(values))) = (object.len(), object.get("one_of")) {
                if values.is_empty() {
                    return Some(String::new());
                }
            }
            object
                .iter()
                .find_map(|(name, value)| empty_choice(value).map(|path| format!(".{name}{path}")))
        }
        Value::Array(values) => values
            .iter()
            .enumerate()
            .find_map(|(index, value)| empty_choice(value).map(|path| format!("[{index}]{path}"))),
        _ => None,
    }
}

/// A program named by a path (one with a `/`) is found from the scenario's directory, as
/// written: a link in it (a virtual environment's `venv/bin/python`) is not followed, so the
/// program runs as what it was named. A bare name is looked up on `PATH`.
fn program_in(directory: &Path, program: &str) -> String {
    if program.contains('/') && Path::new(program).is_relative() {
        let found = directory.join(program);
        return std::path::absolute(&found)
            .unwrap_or(found)
            .display()
            .to_string();
    }
    program.to_string()
}
