//! The server's database as a database of its own in a throwaway PostgreSQL cluster
//! ([`PgCluster::shared`]: one for every store of a check).
//!
//! The triggers are PL/pgSQL: each change to an effect table writes a row to
//! `retrysim_harness.effects` in the server's own transaction, with the process id of the
//! backend that made it, so that changes committed by one call while another was followed can be
//! told apart. The harness reads and deletes the committed rows (`DELETE ... RETURNING`):
//! rows another transaction has not committed yet stay for a later look, whatever order
//! their ids were drawn in. Each run starts from the template: the server's tables emptied
//! and filled again from copies taken once the server made its schema, and their sequences
//! set back, in one transaction of the harness's own, with the server's triggers off
//! (`session_replication_role = replica`) and the harness's told to record nothing (the
//! setting `retrysim.harness`).
//!
//! The harness's objects live in schemas of their own (`retrysim_harness`,
//! `retrysim_template`), so every table in `public` is the server's, whatever its name. Its
//! triggers fire `ALWAYS`, so a server that sets `session_replication_role = replica` is
//! recorded all the same; and after every start of the server they are looked for and put
//! back where a start-up migration rebuilt an effect table without them.

use super::super::{quoted_name, Change, SavedDatabase, ServerDatabase};
use super::{PgClient, PgCluster, PgError, PgRows, Relay, RelayPoints};
use crate::fail_subject;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the harness waits, in real time, for PostgreSQL to end a killed server's
/// backends, and for a lock its own statements wait on: bounds for a loaded machine.
const BACKENDS_GONE_WAIT: Duration = Duration::from_secs(30);

/// How often the harness vacuums the server's tables, in times it puts them back (to the
/// template, or to a copy a check goes back to): each deletes and inserts rows, and the dead
/// ones would slow every later run. (The cluster runs no autovacuum: a worker's locks would
/// be waits the harness cannot tell from the server's.)
const VACUUM_EVERY_RESTORES: u64 = 500;

/// A copy of a server's database ([`ServerDatabase::save`]): each saved table's rows as a
/// JSON array, then the statements that set the sequences back.
struct SavedRows(Vec<String>);

/// A server's database in the check's cluster.
pub(in crate::service) struct PostgresDatabase {
    /// The harness's connection to the database (declared first: closed before the
    /// database is dropped).
    client: PgClient,
    name: String,
    /// The statements that put the template back.
    restore_sql: String,
    /// The query that describes every table of the server's.
    describe_sql: String,
    /// The server's tables and the harness's, vacuumed now and then.
    vacuum_sql: String,
    /// The query that copies every table of the server's and the harness's record of
    /// effects (a JSON array of rows each), and makes the statements that set the server's
    /// sequences back ([`ServerDatabase::save`]).
    save_sql: String,
    /// The tables `save_sql` copies, in its order: each quoted, with the columns an insert
    /// may name.
    saved_tables: Vec<(String, String)>,
    /// How many times the template has been put back.
    restores: u64,
    /// The effect tables, once installed.
    effect_tables: Vec<String>,
    cluster: Arc<PgCluster>,
    /// The relay the server reaches the database through, asking at its transactions'
    /// points; `None` when the server is given the cluster's own socket.
    relay: Option<Relay>,
}

impl PostgresDatabase {
    /// A fresh, empty database in the check's cluster (started on first use), reached by the
    /// server through a relay in `relay_dir` that asks at `points` over the side channel at
    /// `side_channel` when `points` is given.
    pub(in crate::service) fn create(
        points: Option<RelayPoints>,
        relay_dir: &Path,
        side_channel: &Path,
    ) -> Result<PostgresDatabase, String> {
        let cluster = PgCluster::shared().map_err(|PgError(why)| why)?;
        let name = format!("retrysim_{}_{}", std::process::id(), next_database_number());
        let mut admin = cluster.connect("postgres").map_err(|PgError(why)| why)?;
        admin
            .run(
                &format!("CREATE DATABASE {name}"),
                "a database for the server",
            )
            .map_err(|PgError(why)| why)?;
        drop(admin);
        let mut client = cluster.connect(&name).map_err(|PgError(why)| why)?;
        // The harness's statements fire no triggers (its own deletes and inserts are not
        // effects), and never wait on the server without bound.
        let lock_wait_ms = BACKENDS_GONE_WAIT.as_millis();
        client
            .run(
                &format!(
                    "SET session_replication_role = replica; \
                     SET retrysim.harness = 'on'; \
                     SET lock_timeout = {lock_wait_ms}"
                ),
                "the harness's session",
            )
            .map_err(|PgError(why)| why)?;
        Ok(PostgresDatabase {
            client,
            name,
            restore_sql: String::new(),
            describe_sql: "SELECT ''".into(),
            vacuum_sql: String::new(),
            save_sql: String::new(),
            saved_tables: Vec::new(),
            restores: 0,
            effect_tables: Vec::new(),
            relay: match points {
                Some(points) => Some(
                    Relay::start(
                        relay_dir,
                        cluster.port(),
                        &cluster.socket(),
                        side_channel,
                        points,
                    )
                    .map_err(|error| {
                        format!(
                            "the relay to PostgreSQL does not listen in {}: {error}",
                            relay_dir.display()
                        )
                    })?,
                ),
                None => None,
            },
            cluster,
        })
    }

    /// Runs `sql`; a statement the cluster refuses is an error saying what was being done.
    fn run(&mut self, sql: &str, doing: &str) -> Result<PgRows, String> {
        self.client.run(sql, doing).map_err(|PgError(why)| why)
    }

    /// The server's tables in the `public` schema (not the harness's), by name.
    fn server_tables(&mut self) -> Result<Vec<String>, String> {
        let rows = self.run(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') \
             ORDER BY c.relname COLLATE \"C\"",
            "the server's tables cannot be listed",
        )?;
        Ok(rows.into_iter().flatten().flatten().collect())
    }

    /// The triggers that record every change to `table`: an insert, a delete, and an update
    /// that changes some column (an update that leaves its row as it was is no effect). They
    /// fire `ALWAYS`: under `session_replication_role = replica` too.
    fn triggers(table: &str) -> String {
        let quoted = quoted_name(table);
        format!(
            "DROP TRIGGER IF EXISTS retrysim_insert_delete ON {quoted}; \
             DROP TRIGGER IF EXISTS retrysim_update ON {quoted}; \
             CREATE TRIGGER retrysim_insert_delete AFTER INSERT OR DELETE ON {quoted} \
             FOR EACH ROW EXECUTE FUNCTION retrysim_harness.record(); \
             CREATE TRIGGER retrysim_update AFTER UPDATE ON {quoted} \
             FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*) \
             EXECUTE FUNCTION retrysim_harness.record(); \
             ALTER TABLE {quoted} ENABLE ALWAYS TRIGGER retrysim_insert_delete; \
             ALTER TABLE {quoted} ENABLE ALWAYS TRIGGER retrysim_update;"
        )
    }

    /// The effect tables that lack one of the harness's triggers, or have it not firing
    /// `ALWAYS`.
    fn tables_without_triggers(&mut self) -> Result<Vec<String>, String> {
        let rows = self.run(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND (SELECT count(*) \
             FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgenabled = 'A' AND t.tgname \
             IN ('retrysim_insert_delete', 'retrysim_update')) < 2 \
             ORDER BY c.relname COLLATE \"C\"",
            "the harness's triggers cannot be looked for",
        )?;
        let lacking: Vec<String> = rows.into_iter().flatten().flatten().collect();
        Ok((self.effect_tables.iter())
            .filter(|table| lacking.contains(table))
            .cloned()
            .collect())
    }

    /// Copies every table of the server's as it is now into the schema
    /// `retrysim_template`, and makes the statements that put them back with their
    /// sequences, describe them, and vacuum them.
    fn take_template(&mut self, tables: &[String]) -> Result<(), String> {
        let mut copy = String::from("CREATE SCHEMA retrysim_template;");
        let mut restore = String::new();
        let mut described = Vec::new();
        for table in tables {
            let quoted = quoted_name(table);
            let literal = table.replace('\'', "''");
            restore.push_str(&format!("DELETE FROM {quoted};"));
            let columns = self.insertable_columns(table)?;
            copy.push_str(&format!(
                "CREATE TABLE retrysim_template.{quoted} AS SELECT {columns} FROM {quoted};"
            ));
            restore.push_str(&format!(
                "INSERT INTO {quoted} ({columns}) OVERRIDING SYSTEM VALUE \
                 SELECT {columns} FROM retrysim_template.{quoted};"
            ));
            described.push(format!(
                "'{literal} [' || coalesce((SELECT string_agg(r::text, '; ' ORDER BY \
                 r::text COLLATE \"C\") FROM {quoted} r), '') || ']'"
            ));
        }
        self.run(
            &copy,
            "the template of the server's database cannot be taken",
        )?;
        restore.push_str("DELETE FROM retrysim_harness.effects;");
        restore.push_str(&self.sequences_back()?);
        self.restore_sql = restore;
        if !described.is_empty() {
            self.describe_sql = format!("SELECT {}", described.join(" || ' ' || "));
        }
        self.take_save_sql(tables)?;
        let mut vacuumed: Vec<String> = tables.iter().map(|t| quoted_name(t)).collect();
        vacuumed.push("retrysim_harness.effects".into());
        self.vacuum_sql = format!("VACUUM {}", vacuumed.join(", "));
        Ok(())
    }

    /// Counts a putting back of the tables, and vacuums them every [`VACUUM_EVERY_RESTORES`].
    fn count_restore(&mut self) -> Result<(), String> {
        self.restores += 1;
        if self.restores % VACUUM_EVERY_RESTORES == 0 {
            let vacuum = self.vacuum_sql.clone();
            self.run(&vacuum, "the server's tables cannot be vacuumed")?;
        }
        Ok(())
    }

    /// Makes the query that copies `tables` and the harness's record of effects, each as a
    /// JSON array of its rows, and the statements that set the sequences back.
    fn take_save_sql(&mut self, tables: &[String]) -> Result<(), String> {
        let mut saved = Vec::new();
        for table in tables {
            saved.push((quoted_name(table), self.insertable_columns(table)?));
        }
        saved.push((
            "retrysim_harness.effects".to_string(),
            "id, table_name, operation, backend".to_string(),
        ));
        let copies: Vec<String> = (saved.iter())
            .map(|(quoted, columns)| {
                format!(
                    "(SELECT coalesce(json_agg(r), '[]') FROM (SELECT {columns} FROM {quoted}) r)::text"
                )
            })
            .collect();
        self.save_sql = format!(
            "SELECT {}, (SELECT coalesce(string_agg(format('SELECT setval(%L, %s, %s);', \
             quote_ident(schemaname) || '.' || quote_ident(sequencename), \
             coalesce(last_value, start_value), (last_value IS NOT NULL)::text), ''), '') \
             FROM pg_sequences WHERE schemaname = 'public')",
            copies.join(", ")
        );
        self.saved_tables = saved;
        Ok(())
    }

    /// The columns of `table` an insert may name (not generated ones), quoted and joined.
    fn insertable_columns(&mut self, table: &str) -> Result<String, String> {
        let literal = quoted_name(table).replace('\'', "''");
        let rows = self.run(
            &format!(
                "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) \
                 FROM pg_attribute WHERE attrelid = 'public.{literal}'::regclass \
                 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''"
            ),
            "the server's tables cannot be read",
        )?;
        Ok(rows
            .into_iter()
            .flatten()
            .flatten()
            .next()
            .unwrap_or_default())
    }

    /// The statements that set every sequence of the server's back to where it is now.
    fn sequences_back(&mut self) -> Result<String, String> {
        let rows = self.run(
            "SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename), \
             coalesce(last_value, start_value), (last_value IS NOT NULL)::text \
             FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1",
            "the server's sequences cannot be read",
        )?;
        Ok(rows
            .iter()
            .filter_map(|row| match row.as_slice() {
                [Some(name), Some(value), Some(called)] => Some(format!(
                    "SELECT setval('{}', {value}, {called});",
                    name.replace('\'', "''")
                )),
                _ => None,
            })
            .collect())
    }

    /// The server's backends: every connection to its database but the harness's own.
    fn backends_left(&mut self) -> Result<usize, String> {
        let rows = self.run(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid()",
            "the server's connections cannot be listed",
        )?;
        Ok(first_number(&rows) as usize)
    }
}

impl ServerDatabase for PostgresDatabase {
    /// `DATABASE_URL` and the `PG*` variables, and the URL under `env` too when the
    /// scenario names another variable.
    fn server_env(&self, env: &str) -> Vec<(String, String)> {
        let mut variables = match &self.relay {
            Some(relay) => self.cluster.env_via(&self.name, relay.socket_dir()),
            None => self.cluster.env(&self.name),
        };
        if let Some((_, url)) = variables.iter().find(|(name, _)| name == "DATABASE_URL") {
            if env != "DATABASE_URL" {
                let url = url.clone();
                variables.push((env.to_string(), url));
            }
        }
        variables
    }

    fn install(&mut self, effect_tables: &[String]) -> Result<(), String> {
        let tables = self.server_tables()?;
        if let Some(missing) = effect_tables.iter().find(|table| !tables.contains(table)) {
            return Err(format!(
                "effect table `{missing}` is not in the server's database (schema public) once \
                 it has started (its tables: {}); does the server read DATABASE_URL?",
                tables.join(", ")
            ));
        }
        let mut setup = String::from(
            "CREATE SCHEMA retrysim_harness; \
             CREATE TABLE retrysim_harness.effects (id bigserial PRIMARY KEY, \
             table_name text NOT NULL, operation text NOT NULL, \
             backend integer NOT NULL DEFAULT pg_backend_pid()); \
             CREATE FUNCTION retrysim_harness.record() RETURNS trigger LANGUAGE plpgsql AS \
             $retrysim$ BEGIN \
             IF current_setting('retrysim.harness', true) = 'on' THEN RETURN NULL; END IF; \
             INSERT INTO retrysim_harness.effects (table_name, operation) \
             VALUES (TG_TABLE_NAME, lower(TG_OP)); RETURN NULL; END $retrysim$;",
        );
        for table in effect_tables {
            setup.push_str(&Self::triggers(table));
        }
        self.run(&setup, "the harness's triggers do not install")?;
        self.effect_tables = effect_tables.to_vec();
        self.take_template(&tables)
    }

    fn after_start(&mut self) -> Result<(), String> {
        for table in self.tables_without_triggers()? {
            let again = Self::triggers(&table);
            self.run(&again, "the harness's triggers cannot be put back")?;
        }
        Ok(())
    }

    fn take_changes(&mut self) -> Vec<Change> {
        let rows = self
            .run(
                "DELETE FROM retrysim_harness.effects RETURNING operation, backend",
                "the harness's record of effects cannot be read",
            )
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        rows.into_iter()
            .filter_map(|row| match row.as_slice() {
                [Some(operation), backend] => Some(Change {
                    operation: operation.clone(),
                    backend: backend.as_deref().and_then(|pid| pid.parse().ok()),
                }),
                _ => None,
            })
            .collect()
    }

    /// Never: PostgreSQL locks rows and keys, not the database; a call that waits on one is
    /// seen waiting ([`ServerDatabase::waiting_backends`]).
    fn write_locked(&mut self) -> bool {
        false
    }

    /// Backends that wait on a heavyweight lock (a row, a key, a transaction, an advisory
    /// lock, a table) that another backend holds, which only that one's transaction's end (or
    /// its unlock) lets go; not the relation extension or page locks that pass by themselves,
    /// and not a backend whose lock was granted and which has not woken yet.
    fn waiting_backends(&mut self) -> Vec<i32> {
        let rows = self
            .run(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' \
                 AND wait_event NOT IN ('extend', 'page', 'frozenid') \
                 AND cardinality(pg_blocking_pids(pid)) > 0 ORDER BY pid",
                "the server's connections cannot be listed",
            )
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        rows.into_iter()
            .flatten()
            .flatten()
            .filter_map(|pid| pid.parse().ok())
            .collect()
    }

    /// The first backend found waiting on a lock, with the first that blocks it: called when
    /// a request has fallen silent with no other request paused that could hold the lock.
    fn lock_held_outside_requests(&mut self) -> Option<String> {
        let rows = self
            .run(
                "SELECT w.pid, b.pid, b.state, left(regexp_replace(b.query, '\\s+', ' ', 'g'), \
                 200) FROM pg_stat_activity w \
                 CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocker(pid) \
                 JOIN pg_stat_activity b ON b.pid = blocker.pid \
                 WHERE w.datname = current_database() AND w.wait_event_type = 'Lock' \
                 ORDER BY w.pid, b.pid LIMIT 1",
                "the server's lock waits cannot be listed",
            )
            .ok()?;
        let row = rows.into_iter().next()?;
        let [Some(waiting), Some(holder), state, query] = &row[..] else {
            return None;
        };
        let state = state.as_deref().unwrap_or("gone");
        let query = query.as_deref().unwrap_or("");
        Some(format!(
            "a request's database session (backend {waiting}) waits on a lock that backend \
             {holder} holds, which no request paused by the harness owns: it is {state} after \
             `{query}`; a transaction the server leaves open between requests (a background \
             job, a connection not given back to its pool) blocks every request that needs \
             the lock"
        ))
    }

    fn restore_under_server(&mut self) -> Result<(), String> {
        self.count_restore()?;
        let restore = self.restore_sql.clone();
        self.run(
            &restore,
            "the server's database cannot be put back as every run starts (does the server \
             keep a transaction open between requests?)",
        )
        .map(|_| ())
    }

    fn restore_stopped(&mut self) -> Result<(), String> {
        self.restore_under_server()
    }

    /// Every table's rows as JSON and the sequences' values, read in one statement.
    fn save(&mut self) -> Option<SavedDatabase> {
        let sql = self.save_sql.clone();
        let rows = self
            .run(&sql, "the server's database cannot be copied")
            .unwrap_or_else(|why| fail_subject(why.to_string()));
        let copied: Vec<String> = (rows.into_iter().next())
            .map(|row| row.into_iter().map(Option::unwrap_or_default).collect())
            .unwrap_or_default();
        Some(Box::new(SavedRows(copied)))
    }

    /// Every table emptied and filled from its copy, and the sequences set back, in one
    /// transaction, as the template is put back.
    fn put_back(&mut self, saved: &SavedDatabase) -> Result<(), String> {
        let SavedRows(copied) = saved
            .downcast_ref()
            .expect("a copy of a PostgreSQL database");
        let (rows, sequences) = copied.split_at(copied.len().saturating_sub(1));
        let mut statements = String::new();
        for ((quoted, columns), json) in self.saved_tables.iter().zip(rows) {
            let literal = json.replace('\'', "''");
            statements.push_str(&format!(
                "DELETE FROM {quoted}; INSERT INTO {quoted} ({columns}) OVERRIDING SYSTEM VALUE \
                 SELECT {columns} FROM json_populate_recordset(NULL::{quoted}, '{literal}');"
            ));
        }
        statements.extend(sequences.iter().map(String::as_str));
        self.count_restore()?;
        self.run(
            &statements,
            "the server's database cannot be put back to a copy (does the server keep a \
             transaction open between requests?)",
        )
        .map(|_| ())
    }

    /// Ends every backend of the server's (a killed client's backend ends by itself only
    /// when it next reads from its socket: one waiting on a lock would wait on), then waits
    /// until PostgreSQL has rolled back what they had open and they are gone.
    fn arm_points(&self, armed: bool) {
        if let Some(relay) = &self.relay {
            relay.arm(armed);
        }
    }

    fn count_changes_on(&self, tag: &crate::IntentTag) -> bool {
        let Some(relay) = &self.relay else {
            return false;
        };
        let tag = tag.clone();
        relay.on_transaction_end(move || tag.durable_change_committed());
        true
    }

    fn server_gone(&mut self) -> Result<(), String> {
        self.run(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            "the killed server's connections cannot be ended",
        )?;
        let asked = Instant::now();
        while self.backends_left()? > 0 {
            if asked.elapsed() > BACKENDS_GONE_WAIT {
                return Err(format!(
                    "PostgreSQL did not end the killed server's connections within {} s",
                    BACKENDS_GONE_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn describe(&mut self) -> String {
        let describe = self.describe_sql.clone();
        match self.run(&describe, "the server's tables cannot be read") {
            Ok(rows) => rows
                .into_iter()
                .flatten()
                .flatten()
                .next()
                .unwrap_or_default(),
            Err(why) => format!("(unreadable: {why})"),
        }
    }
}

impl Drop for PostgresDatabase {
    /// Drops the database (its connections ended first), so that a long-lived cluster does
    /// not keep one for every store.
    fn drop(&mut self) {
        let Ok(mut admin) = self.cluster.connect("postgres") else {
            return;
        };
        let _ = admin.query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// The number in the first column of the first row, or 0.
fn first_number(rows: &PgRows) -> u64 {
    rows.first()
        .and_then(|row| row.first())
        .and_then(|value| value.as_deref())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// A number no other database of this process has.
fn next_database_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
