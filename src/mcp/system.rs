//! A real MCP server as a system under test ([`OnMcp`]): the engine's clients call one of its
//! tools through a [`Transport`], and the harness's ground truth is the server's own SQLite
//! file, on whose effect tables it installs triggers of its own.
//!
//! The triggers are plain SQL (the server's connection has none of the harness's functions):
//! each change to an effect table writes a row to `retrysim_effects` in the server's own
//! transaction. After each call the harness gives the new rows to the intent it was serving;
//! one call is in flight at a time, so that is exact. The server is restarted for every run on
//! the file as the template left it, and after every crash.

use super::{McpError, ServerCommand, StdioServer, Transport};
use crate::sqlite::rusqlite::{self, Connection};
use crate::sqlite::{table_rows, user_tables};
use crate::{
    Crash, Ctx, Decider, Intent, IntentTag, Keyed, Ledger, NoEvent, Reply, StoreKind, System,
    Workload,
};
use serde_json::Value;
use std::borrow::Cow;
use std::path::PathBuf;

/// The crash point before the call is sent: the server never sees it.
pub const BEFORE_CALL: &str = "before-call";

/// The crash point after the server answered: whatever it committed stays, and its answer is
/// lost with the crash.
pub const AFTER_ANSWER: &str = "after-answer";

/// What to check of a server: how to run it, which tool the clients call and how, and where
/// its effects are.
#[derive(Clone, Debug)]
pub struct McpTarget {
    /// How to run the server (the harness adds the database's path to its environment).
    pub server: ServerCommand,
    /// The environment variable that names the server's database file.
    pub database_env: String,
    /// The tables whose changes are the effects the invariants count.
    pub effect_tables: Vec<String>,
    /// The tool the clients call.
    pub tool: String,
    /// The argument the client's request id goes in; `None` sends none (a client without a
    /// key).
    pub key_argument: Option<String>,
    /// Where the result's value is, as a JSON pointer into the tool's result (e.g.
    /// `/structuredContent/total`): two answers with the same value are the same answer.
    pub value_pointer: String,
    /// Each client's calls: their arguments, in order.
    pub clients: Vec<Vec<Value>>,
}

/// An MCP server as a system under test.
pub struct OnMcp(pub McpTarget);

/// The server, its database file and the harness's record of its effects.
pub struct McpStore {
    server: StdioServer,
    file: PathBuf,
    /// The database as every run starts from it.
    template: Vec<u8>,
    /// The harness's own connection to the file, opened between runs.
    keeper: Connection,
    /// How many rows of `retrysim_effects` the harness has given to intents.
    effects_seen: i64,
    ledger: Ledger,
}

impl McpStore {
    /// Gives the effect rows written since the last look to the intent being served.
    fn take_effects(&mut self) -> usize {
        let written: i64 = self
            .keeper
            .query_row("SELECT count(*) FROM retrysim_effects", [], |row| {
                row.get(0)
            })
            .expect("the harness's effect record reads");
        let new = written - self.effects_seen;
        for _ in 0..new {
            self.ledger.record();
        }
        self.effects_seen = written;
        usize::try_from(new).unwrap_or(0)
    }

    /// Kills the server, puts the template back, and starts it again.
    fn start_from_template(&mut self) -> Result<(), McpError> {
        self.server.kill();
        // The harness lets go of the file while it is put back.
        self.keeper = Connection::open_in_memory().expect("an in-memory connection opens");
        std::fs::write(&self.file, &self.template).expect("the database file writes");
        let _ = std::fs::remove_file(self.file.with_extension("db-journal"));
        self.keeper = Connection::open(&self.file).expect("the database file opens");
        self.effects_seen = 0;
        self.ledger.clear();
        self.server.start().map(|_| ())
    }
}

impl Drop for McpStore {
    fn drop(&mut self) {
        self.server.kill();
        if let Some(directory) = self.file.parent() {
            let _ = std::fs::remove_dir_all(directory);
        }
    }
}

impl OnMcp {
    /// The server's command with the database's path in its environment.
    fn command(&self, file: &std::path::Path) -> ServerCommand {
        let mut command = self.0.server.clone();
        command
            .env
            .push((self.0.database_env.clone(), file.display().to_string()));
        command
    }

    /// The triggers that record every change to `table` in `retrysim_effects`.
    fn triggers(table: &str) -> String {
        [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")]
            .iter()
            .map(|(operation, row)| {
                format!(
                    "CREATE TRIGGER retrysim_{table}_{operation} AFTER {operation} ON \"{table}\" \
                     BEGIN INSERT INTO retrysim_effects VALUES ('{table}', '{operation}', {row}.rowid); END;"
                )
            })
            .collect()
    }

    /// What a tool's result answers: refused when it is a tool error; else its value, applied
    /// when this invocation committed an effect and replayed when it did not.
    fn reply(&self, result: &Value, committed: bool) -> Reply<String> {
        if result.get("isError") == Some(&Value::Bool(true)) {
            return Reply::Refused(result.to_string().into());
        }
        let value = result
            .pointer(&self.0.value_pointer)
            .map_or_else(|| "null".to_string(), Value::to_string);
        if committed {
            Reply::Applied(value)
        } else {
            Reply::Replayed(value)
        }
    }
}

/// Panics with `error`'s line: a server that fails the harness ends the check.
fn failed(error: &McpError) -> ! {
    panic!("{error}")
}

impl StoreKind for OnMcp {
    type Request = Keyed<String>;
    type Value = String;
    type Store = McpStore;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    /// Starts the server once on a fresh file (it makes its schema), puts the harness's
    /// triggers on the effect tables, and keeps the file as every run's template.
    fn open(&self, tag: &IntentTag) -> McpStore {
        let directory = std::env::temp_dir().join(format!(
            "retrysim-mcp-{}-{}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&directory).expect("a scratch directory");
        let file = directory.join("server.db");
        let mut server = StdioServer::new(self.command(&file));
        server.start().unwrap_or_else(|error| failed(&error));
        server.kill();
        let keeper = Connection::open(&file).expect("the server's database opens");
        let mut setup =
            "CREATE TABLE retrysim_effects (table_name TEXT, operation TEXT, row_id INTEGER);"
                .to_string();
        for table in &self.0.effect_tables {
            setup.push_str(&Self::triggers(table));
        }
        keeper
            .execute_batch(&setup)
            .unwrap_or_else(|error| panic!("the harness's triggers install: {error}"));
        drop(keeper);
        let template = std::fs::read(&file).expect("the template reads");
        let keeper = Connection::open(&file).expect("the server's database opens");
        McpStore {
            server,
            file,
            template,
            keeper,
            effects_seen: 0,
            ledger: Ledger::new(tag),
        }
    }

    fn reset(&self, store: &mut McpStore) {
        store
            .start_from_template()
            .unwrap_or_else(|error| failed(&error));
    }

    fn restart(&self, store: &mut McpStore) {
        store.take_effects();
        store.server.start().unwrap_or_else(|error| failed(&error));
    }

    fn apply_event(&self, _store: &mut McpStore, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _store: &McpStore, _request: &Keyed<String>) {}

    fn effects(&self, store: &McpStore) -> Vec<crate::IntentId> {
        store.ledger.effects().to_vec()
    }

    /// Every table of the server's file, row by row.
    fn describe_store(&self, store: &McpStore) -> String {
        describe(&store.keeper).unwrap_or_else(|error| format!("(unreadable: {error})"))
    }
}

impl System for OnMcp {
    /// The target's clients and calls, as many as the bounds allow, each call under a
    /// request id of its own (`r1`, `r2`, ...).
    fn workload(
        &self,
        _decider: &mut Decider<'_>,
        bounds: &crate::Bounds,
    ) -> Workload<Keyed<String>, NoEvent> {
        let mut number = 0;
        let clients = self
            .0
            .clients
            .iter()
            .take(bounds.clients_max as usize)
            .map(|calls| {
                calls
                    .iter()
                    .take(bounds.intents_max as usize)
                    .map(|arguments| {
                        number += 1;
                        Intent::new(Keyed {
                            id: Cow::Owned(format!("r{number}")),
                            args: arguments.to_string(),
                        })
                    })
                    .collect()
            })
            .collect();
        Workload::of_clients(clients)
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut McpStore,
        _memory: &mut (),
        request: &Keyed<String>,
    ) -> Result<Reply<String>, Crash> {
        ctx.point(BEFORE_CALL)?;
        let mut arguments: Value =
            serde_json::from_str(&request.args).expect("arguments the harness wrote");
        if let (Some(key), Some(object)) = (&self.0.key_argument, arguments.as_object_mut()) {
            object.insert(key.clone(), Value::String(request.id.to_string()));
        }
        let answer = store.server.call(&self.0.tool, &arguments);
        let committed = store.take_effects() > 0;
        let reply = match answer {
            Ok(result) => self.reply(&result, committed),
            Err(McpError::Rpc { code, message }) => {
                Reply::Refused(format!("JSON-RPC error {code}: {message}").into())
            }
            Err(error) => failed(&error),
        };
        ctx.point(AFTER_ANSWER)?;
        Ok(reply)
    }
}

/// A name part no other store of this process has.
fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Every table but the harness's, each as `table [row; row]`.
fn describe(keeper: &Connection) -> rusqlite::Result<String> {
    let described: Vec<String> = user_tables(keeper)?
        .iter()
        .map(|table| {
            Ok(format!(
                "{table} [{}]",
                table_rows(keeper, table)?.join("; ")
            ))
        })
        .collect::<rusqlite::Result<_>>()?;
    Ok(described.join(" "))
}
