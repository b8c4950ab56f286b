//! The server's database as a SQLite file in the store's scratch directory.
//!
//! The triggers are plain SQL (the server's connection has none of the harness's
//! functions): each change to an effect table writes a row to `"retrysim:effects"` in the
//! server's own transaction, and rows show only once committed. The harness's names begin
//! `retrysim:`, which needs quoting, so that no table of the server's is taken for one; and
//! after every start of the server its triggers are looked for and put back where a start-up
//! migration rebuilt an effect table without them. Each run starts from the
//! file as the template left it: put back through SQLite's backup API under a running
//! server, or copied while none runs. A crash kills the process, and the restarted one
//! opens the file as the crash left it (SQLite's own recovery runs on it).

use super::{quoted_name, Change, SavedDatabase, ServerDatabase};
use crate::fail_subject;
use crate::sqlite::rusqlite::backup::Backup;
use crate::sqlite::rusqlite::{self, Connection, MAIN_DB};
use crate::sqlite::table_rows;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the harness's own connection waits on the server's locks when it reads the
/// file, in real time.
const KEEPER_BUSY_WAIT: Duration = Duration::from_secs(5);

/// A server's SQLite file, its template, and the harness's connection to it.
pub(in crate::service) struct SqliteFile {
    file: PathBuf,
    /// The database as every run starts from it.
    template: PathBuf,
    /// The harness's own connection to the file, once the triggers are installed.
    keeper: Connection,
    /// How many rows of `"retrysim:effects"` the harness has given out.
    rows_seen: i64,
    /// The effect tables, once installed.
    effect_tables: Vec<String>,
}

/// A copy of the server's file ([`ServerDatabase::save`]).
struct SavedFile {
    /// The file's pages, in a database in memory.
    copy: Connection,
    /// How many rows of `"retrysim:effects"` the harness had given out.
    rows_seen: i64,
}

/// Pages a backup step copies: every page of a server's file at once.
const BACKUP_PAGES_A_STEP: std::os::raw::c_int = std::os::raw::c_int::MAX;

/// How many times a copy waits on a lock another connection holds before it fails, each
/// wait [`BACKUP_BUSY_PAUSE`] (as SQLite's own restore of the template waits).
const BACKUP_BUSY_TRIES: u32 = 50;

/// How long a copy waits on a lock another connection holds, in real time, before it tries
/// again.
const BACKUP_BUSY_PAUSE: Duration = Duration::from_millis(100);

/// Copies every page of `from`'s main database into `to`'s through SQLite's backup API,
/// waiting a bounded while on a lock the server holds.
fn copy_whole(from: &Connection, to: &mut Connection) -> rusqlite::Result<()> {
    use rusqlite::backup::StepResult;
    let backup = Backup::new(from, to)?;
    for _ in 0..BACKUP_BUSY_TRIES {
        match backup.step(BACKUP_PAGES_A_STEP)? {
            StepResult::Done => return Ok(()),
            StepResult::More => {}
            // Busy or locked: another connection holds the file.
            _ => std::thread::sleep(BACKUP_BUSY_PAUSE),
        }
    }
    Err(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
        Some("the server holds a lock on its database".into()),
    ))
}

/// The harness's table in the server's file, quoted.
const EFFECTS_TABLE: &str = "\"retrysim:effects\"";

/// The name of the harness's trigger on `table` for `operation`.
fn trigger_name(table: &str, operation: &str) -> String {
    format!("retrysim:{table}:{operation}")
}

/// The operations each effect table has a trigger for.
const OPERATIONS: [&str; 3] = ["insert", "update", "delete"];

impl SqliteFile {
    /// The file `server.db` in `directory`, not made yet: the server makes it.
    pub(in crate::service) fn new(directory: &Path) -> SqliteFile {
        SqliteFile {
            file: directory.join("server.db"),
            template: directory.join("template.db"),
            keeper: Connection::open_in_memory().expect("an in-memory connection opens"),
            rows_seen: 0,
            effect_tables: Vec::new(),
        }
    }

    /// The triggers that record every change to `table` (whose columns are `columns`) in
    /// `"retrysim:effects"`: an insert, a delete, and an update that changes some column (an
    /// update that leaves its row as it was is no effect). Names are quoted, so a table named
    /// `my-counter` or one `WITHOUT ROWID` takes them as any other.
    fn triggers(table: &str, columns: &[String]) -> String {
        let quoted = quoted_name(table);
        let literal = table.replace('\'', "''");
        let changed: Vec<String> = columns
            .iter()
            .map(|column| {
                let column = quoted_name(column);
                format!("OLD.{column} IS NOT NEW.{column}")
            })
            .collect();
        let when_changed = match changed.is_empty() {
            true => String::new(),
            false => format!(" WHEN {}", changed.join(" OR ")),
        };
        [("insert", ""), ("update", when_changed.as_str()), ("delete", "")]
            .iter()
            .map(|(operation, when)| {
                let trigger = quoted_name(&trigger_name(table, operation));
                format!(
                    "CREATE TRIGGER {trigger} AFTER {operation} ON {quoted}{when} \
                     BEGIN INSERT INTO {EFFECTS_TABLE} VALUES ('{literal}', '{operation}', NULL); END;"
                )
            })
            .collect()
    }
}

impl ServerDatabase for SqliteFile {
    fn server_env(&self, env: &str) -> Vec<(String, String)> {
        vec![(env.to_string(), self.file.display().to_string())]
    }

    fn install(&mut self, effect_tables: &[String]) -> Result<(), String> {
        let keeper = Connection::open(&self.file)
            .map_err(|error| format!("the server's database cannot be opened: {error}"))?;
        let mut setup = format!(
            "CREATE TABLE {EFFECTS_TABLE} (table_name TEXT, operation TEXT, row_id INTEGER);"
        );
        for table in effect_tables {
            let columns = table_columns(&keeper, table)?;
            setup.push_str(&Self::triggers(table, &columns));
        }
        keeper
            .execute_batch(&setup)
            .map_err(|error| format!("the harness's triggers do not install: {error}"))?;
        drop(keeper);
        std::fs::copy(&self.file, &self.template).map_err(|error| {
            format!("the template of the server's database cannot be written: {error}")
        })?;
        self.keeper = open_keeper(&self.file)?;
        self.effect_tables = effect_tables.to_vec();
        Ok(())
    }

    /// Puts back the triggers of each effect table that has lost one (a start-up migration
    /// that dropped and made the table again, or made a new one and renamed it).
    fn after_start(&mut self) -> Result<(), String> {
        for table in &self.effect_tables {
            if self.has_triggers(table)? {
                continue;
            }
            let columns = table_columns(&self.keeper, table)?;
            let drops: String = OPERATIONS
                .iter()
                .map(|operation| {
                    let trigger = quoted_name(&trigger_name(table, operation));
                    format!("DROP TRIGGER IF EXISTS {trigger};")
                })
                .collect();
            let again = format!("{drops}{}", Self::triggers(table, &columns));
            self.keeper.execute_batch(&again).map_err(|error| {
                format!("the harness's triggers on `{table}` cannot be put back: {error}")
            })?;
        }
        Ok(())
    }

    fn take_changes(&mut self) -> Vec<Change> {
        let read = || -> rusqlite::Result<Vec<String>> {
            let mut query = self.keeper.prepare_cached(&format!(
                "SELECT operation FROM {EFFECTS_TABLE} WHERE rowid > ?1 ORDER BY rowid"
            ))?;
            let rows = query.query_map([self.rows_seen], |row| row.get(0))?;
            rows.collect()
        };
        let operations = read().unwrap_or_else(|error| {
            fail_subject(format!(
                "the harness's record of effects in the server's database cannot be read: {error}"
            ))
        });
        self.rows_seen += i64::try_from(operations.len()).unwrap_or(0);
        operations
            .into_iter()
            .map(|operation| Change {
                operation,
                backend: None,
            })
            .collect()
    }

    /// Whether a connection of the server's holds the file's write lock (it is inside a
    /// write transaction), which keeps any other from writing: the harness's own connection
    /// tries to take the write lock itself (`BEGIN IMMEDIATE`), without waiting, and lets it
    /// go at once. A call that holds only a read lock (a deferred transaction that has read)
    /// does not count: others may go on beside it, and meet `SQLITE_BUSY` where a real server
    /// would.
    fn write_locked(&mut self) -> bool {
        let probe = |keeper: &Connection| -> rusqlite::Result<bool> {
            keeper.busy_timeout(Duration::ZERO)?;
            let locked = keeper
                .prepare_cached("BEGIN IMMEDIATE")?
                .execute([])
                .is_err();
            if !keeper.is_autocommit() {
                keeper.prepare_cached("ROLLBACK")?.execute([])?;
            }
            keeper.busy_timeout(KEEPER_BUSY_WAIT)?;
            Ok(locked)
        };
        probe(&self.keeper).unwrap_or_else(|error| {
            fail_subject(format!(
                "the harness cannot probe the server's database for its lock: {error}"
            ))
        })
    }

    fn waiting_backends(&mut self) -> Vec<i32> {
        Vec::new()
    }

    /// Through SQLite's locks, as another connection: the server's own connection reads the
    /// template at its next transaction.
    fn restore_under_server(&mut self) -> Result<(), String> {
        self.rows_seen = 0;
        self.keeper
            .restore(
                MAIN_DB,
                &self.template,
                None::<fn(rusqlite::backup::Progress)>,
            )
            .map_err(|error| {
                format!("the server's database cannot be put back as every run starts: {error}")
            })
    }

    fn restore_stopped(&mut self) -> Result<(), String> {
        self.rows_seen = 0;
        // The harness lets go of the file while it is put back.
        self.keeper = Connection::open_in_memory().expect("an in-memory connection opens");
        std::fs::copy(&self.template, &self.file)
            .map_err(|error| format!("the server's database file cannot be written: {error}"))?;
        for leftover in ["db-journal", "db-wal", "db-shm"] {
            let _ = std::fs::remove_file(self.file.with_extension(leftover));
        }
        self.keeper = open_keeper(&self.file)?;
        Ok(())
    }

    /// Nothing to wait for: SQLite has no process of its own, and a killed server's locks
    /// go with it.
    fn server_gone(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Through SQLite's backup API into a database in memory, with the count of effect rows
    /// given out (their table is in the copy).
    fn save(&mut self) -> Option<SavedDatabase> {
        let mut copy = Connection::open_in_memory().expect("an in-memory connection opens");
        copy_whole(&self.keeper, &mut copy).unwrap_or_else(|error| {
            fail_subject(format!("the server's database cannot be copied: {error}"))
        });
        Some(Box::new(SavedFile {
            copy,
            rows_seen: self.rows_seen,
        }))
    }

    /// Through SQLite's locks, as the template is put back.
    fn put_back(&mut self, saved: &SavedDatabase) -> Result<(), String> {
        let saved: &SavedFile = saved.downcast_ref().expect("a copy of a SQLite file");
        self.rows_seen = saved.rows_seen;
        copy_whole(&saved.copy, &mut self.keeper)
            .map_err(|error| format!("the server's database cannot be put back: {error}"))
    }

    /// Every table but the harness's, each as `table [row; row]`.
    fn describe(&mut self) -> String {
        let keeper = &self.keeper;
        let described = server_tables(keeper).and_then(|tables| {
            tables
                .iter()
                .map(|table| {
                    Ok(format!(
                        "{table} [{}]",
                        table_rows(keeper, table)?.join("; ")
                    ))
                })
                .collect::<rusqlite::Result<Vec<String>>>()
        });
        match described {
            Ok(described) => described.join(" "),
            Err(error) => format!("(unreadable: {error})"),
        }
    }
}

/// The columns of the effect table `table` in the server's file, after the server made its
/// schema: an error of one line when it has no such table.
fn table_columns(keeper: &Connection, table: &str) -> Result<Vec<String>, String> {
    let columns: Vec<String> = keeper
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .and_then(|mut statement| {
            statement
                .query_map([table], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|error| format!("the server's database cannot be read: {error}"))?;
    if columns.is_empty() {
        let tables = server_tables(keeper).unwrap_or_default().join(", ");
        return Err(format!(
            "effect table `{table}` is not in the server's database once it has started (its \
             tables: {tables})"
        ));
    }
    Ok(columns)
}

impl SqliteFile {
    /// Whether every trigger of the harness's is on `table`.
    fn has_triggers(&self, table: &str) -> Result<bool, String> {
        let names: Vec<String> = OPERATIONS
            .iter()
            .map(|operation| trigger_name(table, operation))
            .collect();
        let found: i64 = self
            .keeper
            .prepare_cached(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?1 \
                 AND name IN (?2, ?3, ?4)",
            )
            .and_then(|mut statement| {
                statement.query_row([table, &names[0], &names[1], &names[2]], |row| row.get(0))
            })
            .map_err(|error| format!("the server's database cannot be read: {error}"))?;
        Ok(found == names.len() as i64)
    }
}

/// The server's tables in its file, by name: every table but SQLite's and the harness's
/// (whose names begin `retrysim:`). A server's `retrysim_effects` or `retrysimcounter` is its
/// own.
fn server_tables(keeper: &Connection) -> rusqlite::Result<Vec<String>> {
    keeper
        .prepare_cached(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'retrysim:%' \
             ORDER BY name",
        )?
        .query_map([], |row| row.get(0))?
        .collect()
}

/// The harness's own connection to the server's file.
fn open_keeper(file: &Path) -> Result<Connection, String> {
    let keeper = Connection::open(file)
        .map_err(|error| format!("the server's database cannot be opened: {error}"))?;
    keeper
        .busy_timeout(KEEPER_BUSY_WAIT)
        .map_err(|error| format!("the server's database cannot be opened: {error}"))?;
    Ok(keeper)
}
