//! Ground truth for SQLite stores, recorded inside the same transaction as the effect.
//!
//! A [`HarnessDb`] is a shared in-memory database (SQLite's `memdb`, through a VFS that makes
//! a write fail with `SQLITE_IOERR_WRITE` when the schedule chose a storage fault) kept alive by a
//! harness-held *keeper* connection, so it survives the server's connections being closed by a
//! simulated crash. Triggers on the domain's effect tables write the current intent (read
//! from the engine's [`IntentTag`] through the SQL function `retrysim_intent()`) into the
//! harness table `retrysim_effects`: a ground-truth row commits or rolls back with its effect,
//! and a handler cannot forget to report one. Every connection also has `retrysim_now()`, the
//! run's simulated clock in milliseconds (never the wall clock).

use crate::clock::Deadline;
use crate::ctx::Crash;
use crate::fault_vfs;
pub use crate::run::tasks::wait_for_lock;
use crate::vocabulary::{IntentId, IntentTag, Reply, Status};
/// The rusqlite the harness is built on: write handlers against this one, so that their
/// connections are the engine's type.
pub use rusqlite;
use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};

/// Distinguishes the memdb names of the databases opened by this process. The name never
/// reaches a run's behaviour or output.
static DATABASES_OPENED: AtomicU64 = AtomicU64::new(0);

const EFFECTS_SCHEMA: &str = "CREATE TABLE retrysim_effects (
    seq INTEGER PRIMARY KEY,
    intent INTEGER NOT NULL,
    table_name TEXT NOT NULL,
    operation TEXT NOT NULL,
    row_id INTEGER
);";

/// A shared in-memory SQLite database with ground-truth triggers on its effect tables, the
/// harness's keeper connection, and the server's connection (rolled back by a crash).
pub struct HarnessDb {
    uri: String,
    keeper: Connection,
    server: Connection,
    tag: IntentTag,
    /// Every table of the database (ground truth included), for fingerprints of its rows.
    tables: Vec<TableReader>,
    /// Commits on the connections [`HarnessDb::connect`] opened.
    other_commits: Arc<AtomicU64>,
}

/// A copy of a [`HarnessDb`]'s committed database file, byte for byte: made by
/// [`HarnessDb::save`] and put back by [`HarnessDb::restore`], rowids, free pages and all.
#[derive(Clone)]
pub struct DbImage {
    bytes: Vec<u8>,
}

impl fmt::Debug for DbImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DbImage({} bytes)", self.bytes.len())
    }
}

/// Where SQLite's database header keeps its file change counter (a big-endian `u32`): a
/// connection drops its page cache when the counter differs from the one it read last.
const CHANGE_COUNTER_AT: usize = 24;
/// Where the header keeps the counter's value at which its page count was written (valid
/// while the two are equal).
const VERSION_VALID_FOR_AT: usize = 92;

impl PartialEq for DbImage {
    /// The same database file but for the change counters ([`HarnessDb::restore`] sets new
    /// ones, so that connections drop what they cached).
    fn eq(&self, other: &Self) -> bool {
        let counters = [CHANGE_COUNTER_AT, VERSION_VALID_FOR_AT];
        let outside_counters = |at: &usize| counters.iter().all(|&c| !(c..c + 4).contains(at));
        self.bytes.len() == other.bytes.len()
            && (0..self.bytes.len())
                .filter(outside_counters)
                .all(|at| self.bytes[at] == other.bytes[at])
    }
}

/// How one table's rows are read, for fingerprints: with their rowids (the next insert's
/// rowid depends on them), unless the table has none (`WITHOUT ROWID`) or its
/// `INTEGER PRIMARY KEY` column already is the rowid.
#[derive(Debug)]
struct TableReader {
    name: String,
    select: String,
    /// The columns `select` reads, quoted, and its `ORDER BY`.
    columns: Vec<String>,
    order: &'static str,
}

impl TableReader {
    fn for_table(keeper: &Connection, table: &str) -> rusqlite::Result<Self> {
        let mut columns = Vec::new();
        let mut rowid_alias = false;
        let mut statement = keeper.prepare(&format!("PRAGMA table_info(\"{table}\")"))?;
        let mut rows = statement.query([])?;
        let mut primary_keys = 0;
        while let Some(row) = rows.next()? {
            let name: String = row.get("name")?;
            let kind: String = row.get("type")?;
            let primary_key: i64 = row.get("pk")?;
            if primary_key > 0 {
                primary_keys += 1;
                rowid_alias = kind.eq_ignore_ascii_case("INTEGER");
            }
            columns.push(format!("\"{name}\""));
        }
        let has_rowid = keeper
            .prepare(&format!("SELECT rowid FROM \"{table}\""))
            .is_ok();
        if has_rowid && !(rowid_alias && primary_keys == 1) {
            columns.insert(0, "rowid".to_string());
        }
        let list = columns.join(", ");
        let order = if has_rowid { " ORDER BY rowid" } else { "" };
        Ok(TableReader {
            name: table.to_string(),
            select: format!("SELECT {list} FROM \"{table}\"{order}"),
            columns,
            order,
        })
    }

    /// Its select without the columns `left_out`.
    fn select_without(&self, left_out: &[&str]) -> String {
        for out in left_out {
            assert!(
                self.columns.contains(&format!("\"{out}\"")),
                "table {} has no column {out:?} to leave out",
                self.name
            );
        }
        let kept: Vec<&str> = self
            .columns
            .iter()
            .map(String::as_str)
            .filter(|column| !left_out.iter().any(|out| *column == format!("\"{out}\"")))
            .collect();
        let list = if kept.is_empty() {
            "1".to_string()
        } else {
            kept.join(", ")
        };
        format!("SELECT {list} FROM \"{}\"{}", self.name, self.order)
    }
}

fn table_readers(keeper: &Connection) -> rusqlite::Result<Vec<TableReader>> {
    let names: Vec<String> = keeper
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND (name NOT LIKE 'sqlite%' OR name = 'sqlite_sequence') ORDER BY name",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    names
        .iter()
        .map(|name| TableReader::for_table(keeper, name))
        .collect()
}

impl HarnessDb {
    /// Creates a fresh database: runs `schema` (tables and fixture rows), then installs
    /// ground-truth triggers recording every insert, update and delete made on
    /// `effect_tables` while an intent is being served.
    pub fn create(tag: &IntentTag, schema: &str, effect_tables: &[&str]) -> rusqlite::Result<Self> {
        configure_sqlite();
        let number = DATABASES_OPENED.fetch_add(1, Ordering::Relaxed);
        let uri = format!("file:/retrysim-{number}?vfs={}", fault_vfs::VFS_NAME);
        let keeper = open_connection(&uri, tag)?;
        keeper.execute_batch(&format!("PRAGMA page_size = {PAGE_SIZE_BYTES}"))?;
        keeper.execute_batch(schema)?;
        keeper.execute_batch(EFFECTS_SCHEMA)?;
        for table in effect_tables {
            keeper.execute_batch(&ground_truth_triggers(table))?;
        }
        let server = open_connection(&uri, tag)?;
        let tables = table_readers(&keeper)?;
        Ok(HarnessDb {
            uri,
            keeper,
            server,
            tag: tag.clone(),
            tables,
            other_commits: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The server's connection: handlers run on it.
    pub fn server(&self) -> &Connection {
        &self.server
    }

    /// Restarts the server after a crash: the transaction its connection had open is rolled
    /// back, as closing the connection would, so only committed data survives.
    ///
    /// The connection itself is kept, with its prepared statements: a reopened one would parse
    /// the schema and prepare every statement again, which cost more than all the rest of a
    /// run. Nothing a handler reads through SQL differs; connection-local state (TEMP tables,
    /// PRAGMAs) does survive, so a handler must not keep request state there.
    pub fn restart_server(&mut self) {
        if !self.server.is_autocommit() {
            self.server
                .execute_batch("ROLLBACK")
                .expect("the server's transaction rolls back");
        }
    }

    /// Opens another connection to the database (a server connection), with
    /// `retrysim_intent()` registered.
    pub fn connect(&self) -> rusqlite::Result<Connection> {
        let connection = open_connection(&self.uri, &self.tag)?;
        let commits = Arc::clone(&self.other_commits);
        let tag = self.tag.clone();
        connection.commit_hook(Some(move || {
            tag.durable_change_committed();
            commits.fetch_add(1, Ordering::Relaxed);
            false
        }));
        Ok(connection)
    }

    /// A count that moves whenever the database may have changed (see
    /// [`crate::StoreKind::store_version`]): rows changed on the keeper and server connections
    /// (SQLite's change counts, which also count changes later rolled back), plus commits on
    /// the connections [`HarnessDb::connect`] opened. While it stays, no connection of this
    /// database changed a row.
    pub fn version(&self) -> u64 {
        let changes = |connection: &Connection| {
            // SAFETY: the handle belongs to a connection open for as long as `self`;
            // sqlite3_total_changes64 only reads its change counter.
            let total = unsafe { rusqlite::ffi::sqlite3_total_changes64(connection.handle()) };
            total as u64
        };
        changes(&self.keeper) + changes(&self.server) + self.other_commits.load(Ordering::Relaxed)
    }

    /// The harness's own connection: it sees committed data only, so it reads the durable
    /// state; use it for fixtures and for admin events.
    pub fn keeper(&self) -> &Connection {
        &self.keeper
    }

    /// The deadlines `sql` selects from the committed store: each row a moment in simulated
    /// milliseconds and what happens then, e.g. `SELECT lease_ends_ms, 'the lease on ' ||
    /// key || ' ends' FROM claims WHERE charge IS NULL` for the leases still held (a time
    /// before 0 reads 0). For [`crate::SqlHandler::deadlines`].
    ///
    /// # Panics
    /// If the statement fails.
    pub fn deadlines(&self, sql: &str) -> Vec<Deadline> {
        let mut rows = self
            .keeper
            .prepare_cached(sql)
            .unwrap_or_else(|error| panic!("the deadlines' query {sql:?} fails: {error}"));
        rows.query_map([], |row| {
            Ok(Deadline {
                at_ms: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                what: row.get(1)?,
            })
        })
        .and_then(Iterator::collect)
        .unwrap_or_else(|error| panic!("the deadlines' query {sql:?} fails: {error}"))
    }

    /// The ground truth: the intent of every committed effect, in commit order.
    pub fn effects(&self) -> Vec<IntentId> {
        self.intents_of("SELECT intent FROM retrysim_effects ORDER BY seq", [])
    }

    /// The intents `sql` (a query of `retrysim_effects`' `intent` column) reads with `params`.
    fn intents_of(&self, sql: &str, params: impl rusqlite::Params) -> Vec<IntentId> {
        let mut statement = self
            .keeper
            .prepare_cached(sql)
            .expect("the harness table exists");
        let rows = statement
            .query_map(params, |row| row.get::<_, u32>(0))
            .expect("the harness table is readable");
        rows.map(|raw| IntentId(raw.expect("intent is an integer") - 1))
            .collect()
    }

    /// The ground truth but for the changes to `recorded` (tables whose rows are recorded
    /// under their intents without being effects): the intent of every other committed
    /// effect, in commit order.
    pub fn effects_outside(&self, recorded: &[&str]) -> Vec<IntentId> {
        let quoted: Vec<String> = recorded
            .iter()
            .map(|table| format!("'{}'", table.replace('\'', "''")))
            .collect();
        let sql = format!(
            "SELECT intent FROM retrysim_effects WHERE table_name NOT IN ({}) ORDER BY seq",
            quoted.join(", ")
        );
        self.intents_of(&sql, [])
    }

    /// The ground truth of one effect table: the intent of every committed effect on
    /// `table`, in commit order.
    pub fn effects_in(&self, table: &str) -> Vec<IntentId> {
        self.intents_of(
            "SELECT intent FROM retrysim_effects WHERE table_name = ?1 ORDER BY seq",
            [table],
        )
    }

    /// The intent whose invocation inserted the row `row_id` of the effect table `table`, by
    /// the ground truth (`None` if no intent did): which intent a relay serves when it sends
    /// an outbox row.
    pub fn row_intent(&self, table: &str, row_id: i64) -> Option<IntentId> {
        self.keeper
            .prepare_cached(
                "SELECT intent FROM retrysim_effects \
                 WHERE table_name = ?1 AND row_id = ?2 AND operation = 'insert' \
                 ORDER BY seq LIMIT 1",
            )
            .and_then(|mut first| {
                first
                    .query_row(rusqlite::params![table, row_id], |row| row.get::<_, u32>(0))
                    .optional()
            })
            .expect("the harness table is readable")
            .map(|raw| IntentId(raw - 1))
    }

    /// How many committed effects of any intent changed the row `row_id` of `table`, by the
    /// ground truth: for invariants that must not trust a column the handler keeps (a version
    /// counter, say).
    pub fn effects_on(&self, table: &str, row_id: i64) -> u64 {
        self.keeper
            .prepare_cached(
                "SELECT count(*) FROM retrysim_effects WHERE table_name = ?1 AND row_id = ?2",
            )
            .and_then(|mut count| {
                count.query_row(rusqlite::params![table, row_id], |row| row.get(0))
            })
            .expect("the harness table is readable")
    }

    /// A fingerprint of every row of `tables` and of the ground truth, for state hashing.
    ///
    /// # Panics
    /// If the database has no table of one of these names.
    pub fn fingerprint(&self, tables: &[&str]) -> u64 {
        let selects: Vec<&str> = tables
            .iter()
            .map(|table| self.reader(table).select.as_str())
            .collect();
        self.fingerprint_of(&selects)
    }

    /// A fingerprint of the rows `selects` read (in their order) and of the ground truth, for
    /// state hashing: for a store that keeps columns its behaviour does not depend on, or
    /// times that [`crate::StoreKind::deadlines`] already tells relative to now (a creation
    /// time whose only use is an expiry).
    pub fn fingerprint_of(&self, selects: &[&str]) -> u64 {
        let ground_truth = self.reader("retrysim_effects").select.as_str();
        let mut hasher = crate::StateHasher::default();
        // One read transaction for every table: a lock taken once.
        execute_cached(&self.keeper, "BEGIN").expect("a read transaction begins");
        for sql in selects.iter().chain([&ground_truth]) {
            sql.hash(&mut hasher);
            let mut statement = self.keeper.prepare_cached(sql).expect("the table exists");
            let columns = statement.column_count();
            let mut rows = statement.query([]).expect("the table is readable");
            while let Some(row) = rows.next().expect("a row reads") {
                for column in 0..columns {
                    hash_value(row.get_ref(column).expect("a column reads"), &mut hasher);
                }
            }
        }
        execute_cached(&self.keeper, "COMMIT").expect("a read transaction ends");
        hasher.finish()
    }

    /// The select that [`HarnessDb::fingerprint`] reads `table` with, but for the columns
    /// `left_out`: for [`HarnessDb::fingerprint_of`] of a store whose times in those columns
    /// its deadlines tell relative to now.
    ///
    /// # Panics
    /// If the database has no such table, or the table no such column.
    pub fn select_without(&self, table: &str, left_out: &[&str]) -> String {
        self.reader(table).select_without(left_out)
    }

    fn reader(&self, table: &str) -> &TableReader {
        self.tables
            .iter()
            .find(|reader| reader.name == table)
            .unwrap_or_else(|| panic!("the database has no table {table:?}"))
    }

    /// Returns the database to its initial contents: runs each statement of `reset` (together
    /// they must undo every change a run can make) and clears the ground truth, in one
    /// transaction. Statements are prepared once per connection and cached.
    pub fn reset(&self, reset: &[&str]) -> rusqlite::Result<()> {
        execute_cached(&self.keeper, "BEGIN IMMEDIATE")?;
        for statement in reset {
            execute_cached(&self.keeper, statement)?;
        }
        execute_cached(&self.keeper, "DELETE FROM retrysim_effects")?;
        execute_cached(&self.keeper, "COMMIT").map(drop)
    }

    /// Copies the committed database file (ground truth included), so that
    /// [`HarnessDb::restore`] can put the database back exactly as it is now. It reads the
    /// file under a shared lock: no transaction is committing meanwhile.
    pub fn save(&self) -> DbImage {
        execute_cached(&self.keeper, "BEGIN").expect("a read transaction begins");
        // A read takes the shared lock.
        let _: i64 = self
            .keeper
            .prepare_cached("SELECT count(*) FROM sqlite_master")
            .and_then(|mut count| count.query_row([], |row| row.get(0)))
            .expect("the schema is readable");
        let file = DatabaseFile::of(&self.keeper);
        let mut bytes = vec![0; file.size()];
        file.read(&mut bytes, 0);
        execute_cached(&self.keeper, "COMMIT").expect("a read transaction ends");
        DbImage { bytes }
    }

    /// Puts the database back to `image` (made by [`HarnessDb::save`] of this database): its
    /// file is written back whole under the keeper's exclusive lock, with a change counter no
    /// version of the file had before, so that every connection drops its cached pages at
    /// its next transaction, as after any commit. No other connection may be in a
    /// transaction.
    pub fn restore(&self, image: &DbImage) {
        execute_cached(&self.keeper, "BEGIN EXCLUSIVE")
            .expect("no other connection is in a transaction while the database restores");
        let file = DatabaseFile::of(&self.keeper);
        let mut counter = [0; 4];
        file.read(&mut counter, CHANGE_COUNTER_AT);
        // The counter only grows (commits add one to it, restores set the largest yet plus
        // one), so each value names one content of the file.
        let fresh = u32::from_be_bytes(counter).wrapping_add(1).to_be_bytes();
        file.write(&image.bytes, 0);
        file.write(&fresh, CHANGE_COUNTER_AT);
        file.write(&fresh, VERSION_VALID_FOR_AT);
        file.truncate(image.bytes.len());
        execute_cached(&self.keeper, "COMMIT").expect("the restore's transaction ends");
        // No row changed through SQL: the version moves by this count instead.
        self.other_commits.fetch_add(1, Ordering::Relaxed);
    }
}

/// A connection's main database file, as its VFS holds it, for [`HarnessDb::save`] and
/// [`HarnessDb::restore`] to copy it whole.
struct DatabaseFile(*mut rusqlite::ffi::sqlite3_file);

impl DatabaseFile {
    fn of(connection: &Connection) -> Self {
        let mut file: *mut rusqlite::ffi::sqlite3_file = std::ptr::null_mut();
        // SAFETY: the handle belongs to an open connection, and SQLITE_FCNTL_FILE_POINTER
        // writes one `sqlite3_file` pointer, which the connection owns for as long as it is
        // open, into `file`.
        let code = unsafe {
            rusqlite::ffi::sqlite3_file_control(
                connection.handle(),
                c"main".as_ptr(),
                rusqlite::ffi::SQLITE_FCNTL_FILE_POINTER,
                (&raw mut file).cast(),
            )
        };
        assert!(
            code == rusqlite::ffi::SQLITE_OK && !file.is_null(),
            "the database has a file"
        );
        // SAFETY: the file is open; the copy is made below the storage-fault VFS, whose
        // writes may fail.
        DatabaseFile(unsafe { fault_vfs::unwrapped(file) })
    }

    fn methods(&self) -> &rusqlite::ffi::sqlite3_io_methods {
        // SAFETY: an open file's methods stay set while it is open.
        unsafe { &*(*self.0).pMethods }
    }

    fn size(&self) -> usize {
        let mut size = 0;
        let file_size = self.methods().xFileSize.expect("a file has a size");
        // SAFETY: the file is open; `size` outlives the call.
        check_io(unsafe { file_size(self.0, &mut size) });
        usize::try_from(size).expect("a database file's size fits in memory")
    }

    fn read(&self, into: &mut [u8], at: usize) {
        let read = self.methods().xRead.expect("a file reads");
        let length = c_int::try_from(into.len()).expect("an image under 2 GiB");
        // SAFETY: the file is open; `into` has room for `length` bytes.
        check_io(unsafe { read(self.0, into.as_mut_ptr().cast(), length, at as i64) });
    }

    fn write(&self, bytes: &[u8], at: usize) {
        let write = self.methods().xWrite.expect("a file writes");
        let length = c_int::try_from(bytes.len()).expect("an image under 2 GiB");
        // SAFETY: the file is open and its connection holds the exclusive lock; `bytes` has
        // `length` bytes.
        check_io(unsafe { write(self.0, bytes.as_ptr().cast(), length, at as i64) });
    }

    fn truncate(&self, size: usize) {
        let truncate = self.methods().xTruncate.expect("a file truncates");
        // SAFETY: the file is open and its connection holds the exclusive lock.
        check_io(unsafe { truncate(self.0, size as i64) });
    }
}

fn check_io(code: c_int) {
    assert_eq!(
        code,
        rusqlite::ffi::SQLITE_OK,
        "the in-memory database file is written"
    );
}

fn hash_value(value: rusqlite::types::ValueRef<'_>, hasher: &mut impl Hasher) {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Null => 0u8.hash(hasher),
        ValueRef::Integer(integer) => (1u8, integer).hash(hasher),
        ValueRef::Real(real) => (2u8, real.to_bits()).hash(hasher),
        ValueRef::Text(text) => (3u8, text).hash(hasher),
        ValueRef::Blob(blob) => (4u8, blob).hash(hasher),
    }
}

/// Retention of a table whose rows carry their creation time in a `created_ms` column
/// (written with `retrysim_now()`): each row expires `retention_ms` after it, when a
/// store-side job purges it. Gives a system's [`crate::StoreKind::deadlines`] and
/// [`crate::StoreKind::pass_time`] for that table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// The table.
    pub table: &'static str,
    /// A SQL expression naming a row for timelines, e.g. `'record ' || key`.
    pub row_name: &'static str,
    /// How long a row is kept, in simulated milliseconds from its creation.
    pub retention_ms: u64,
}

impl Retention {
    /// When each committed row of the table expires, and what expires then.
    pub fn deadlines(&self, db: &HarnessDb) -> Vec<Deadline> {
        db.deadlines(&format!(
            "SELECT created_ms + {}, {} || ' expires' FROM {}",
            self.retention_ms, self.row_name, self.table
        ))
    }

    /// Purges the rows expired by `now_ms`, outside any intent.
    pub fn purge(&self, db: &HarnessDb, now_ms: u64) {
        let created_by = now_ms.saturating_sub(self.retention_ms);
        let sql = format!("DELETE FROM {} WHERE created_ms <= ?1", self.table);
        db.keeper()
            .prepare_cached(&sql)
            .and_then(|mut purge| purge.execute([i64::try_from(created_by).unwrap_or(i64::MAX)]))
            .expect("expired rows purge");
    }
}

/// The first column of every row `sql` selects on `connection`, as text, for describing a
/// store in timelines; a NULL (a concatenation with a NULL column, say) reads `null`.
///
/// # Panics
/// If the statement fails: a store the harness describes is always readable.
pub fn column_strings(connection: &Connection, sql: &str) -> Vec<String> {
    let mut statement = connection
        .prepare_cached(sql)
        .expect("the store is readable");
    let rows = statement
        .query_map([], |row| row.get::<_, Option<String>>(0))
        .expect("the store is readable");
    rows.map(|row| {
        row.expect("a row reads")
            .unwrap_or_else(|| "null".to_string())
    })
    .collect()
}

/// Executes one parameterless statement through the connection's statement cache (cheaper
/// than `execute_batch`, which parses its text on every call).
pub fn execute_cached(connection: &Connection, sql: &str) -> rusqlite::Result<usize> {
    connection.prepare_cached(sql)?.execute([])
}

/// Turns off SQLite's memory statistics, whose global mutex serialises every allocation of
/// every thread: exploration threads would queue on it. It only works before SQLite is first
/// used in the process; later it is refused, harmlessly.
fn configure_sqlite() {
    static CONFIGURED: Once = Once::new();
    CONFIGURED.call_once(|| {
        // SAFETY: sqlite3_config is called before any connection of this process is opened by
        // the harness; if SQLite is already initialised it returns SQLITE_MISUSE and changes
        // nothing.
        unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int);
        }
    });
    fault_vfs::register();
}

/// The database's page size, set before its schema: SQLite's smallest. A transaction copies
/// each page it first writes into its rollback journal, and the harness's databases are a
/// few rows per table, so a smaller page is that much less to copy (the default 4096 bytes
/// made a check spend an eighth of its time more).
const PAGE_SIZE_BYTES: u32 = 512;

/// Prepared statements each connection keeps (rusqlite keeps 16 by default).
const STATEMENT_CACHE_CAPACITY: usize = 128;

fn open_connection(uri: &str, tag: &IntentTag) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(uri, flags)?;
    // Room for every statement a handler, the harness's copies and the fingerprints use: a
    // statement that falls out of the cache is parsed again on its next use.
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    let intent = tag.clone();
    connection.create_scalar_function(
        "retrysim_intent",
        0,
        FunctionFlags::SQLITE_UTF8,
        move |_| Ok(intent.raw()),
    )?;
    // Not deterministic for SQLite (the value moves between statements): never constant-folded.
    let clock = tag.clock().clone();
    connection.create_scalar_function(
        "retrysim_now",
        0,
        FunctionFlags::SQLITE_UTF8,
        move |_| Ok(i64::try_from(clock.now_ms()).unwrap_or(i64::MAX)),
    )?;
    // A storage fault the schedule chose fails the COMMIT's first write (see `fault_vfs`).
    fault_vfs::give_tag(&connection, tag);
    // Every commit may be a durable change (one whose write then fails is counted too: the
    // count may only move more often than the database changes).
    let changes = tag.clone();
    connection.commit_hook(Some(move || {
        changes.durable_change_committed();
        false
    }));
    Ok(connection)
}

fn ground_truth_triggers(table: &str) -> String {
    [("insert", "NEW"), ("update", "NEW"), ("delete", "OLD")]
        .iter()
        .map(|(operation, row)| {
            format!(
                "CREATE TRIGGER retrysim_{table}_{operation} AFTER {operation} ON {table} \
                 WHEN retrysim_intent() > 0 BEGIN \
                 INSERT INTO retrysim_effects (intent, table_name, operation, row_id) \
                 VALUES (retrysim_intent(), '{table}', '{operation}', {row}.rowid); END;"
            )
        })
        .collect()
}

/// Why a SQLite handler stopped early: use it as the error type of a handler's body so that
/// `?` works on both crash points and rusqlite calls, then [`settle`] it.
#[derive(Debug)]
pub enum Stop {
    /// The server crashed at a crash point.
    Crash(Crash),
    /// SQLite reported an error.
    Storage(rusqlite::Error),
}

impl From<Crash> for Stop {
    fn from(crash: Crash) -> Self {
        Stop::Crash(crash)
    }
}

impl From<rusqlite::Error> for Stop {
    fn from(error: rusqlite::Error) -> Self {
        Stop::Storage(error)
    }
}

/// Turns a status lookup's result into a lookup's result: a crash passes through, a storage
/// error rolls back any open transaction and is answered [`Status::Unavailable`]
/// (`storage error: ...`).
pub fn settle_lookup<V>(
    result: Result<Status<V>, Stop>,
    connection: &Connection,
) -> Result<Status<V>, Crash> {
    match result {
        Ok(status) => Ok(status),
        Err(Stop::Crash(crash)) => Err(crash),
        Err(Stop::Storage(error)) => {
            roll_back(connection);
            Ok(Status::Unavailable(
                format!("storage error: {error}").into(),
            ))
        }
    }
}

/// Turns a background job's result into the engine's: a crash passes through, a storage
/// error rolls back any open transaction and leaves the work queued (the job's next run tries
/// it again).
pub fn settle_job(result: Result<(), Stop>, connection: &Connection) -> Result<(), Crash> {
    match result {
        Ok(()) => Ok(()),
        Err(Stop::Crash(crash)) => Err(crash),
        Err(Stop::Storage(_)) => {
            roll_back(connection);
            Ok(())
        }
    }
}

/// Rolls back the transaction `connection` has open, if any; a failed rollback leaves it to
/// the next crash or reset.
fn roll_back(connection: &Connection) {
    if !connection.is_autocommit() {
        let _ = connection.execute_batch("ROLLBACK");
    }
}

/// The answer of a handler once it has called an outside service: a storage error from then
/// on cannot say that nothing happened outside, so it is rolled back and answered
/// [`Reply::Pending`] instead of *unavailable* (which tells the client nothing was done).
/// A crash passes through.
pub fn pending_on_storage_error<V>(
    result: Result<Reply<V>, Stop>,
    connection: &Connection,
) -> Result<Reply<V>, Stop> {
    match result {
        Err(Stop::Storage(_)) => {
            roll_back(connection);
            Ok(Reply::Pending)
        }
        other => other,
    }
}

/// Turns a handler body's result into a handler's result: a crash passes through (the engine
/// closes the connection), a storage error rolls back any open transaction and is answered
/// [`Reply::Unavailable`] (`storage error: ...`).
pub fn settle<V>(
    result: Result<Reply<V>, Stop>,
    connection: &Connection,
) -> Result<Reply<V>, Crash> {
    match result {
        Ok(reply) => Ok(reply),
        Err(Stop::Crash(crash)) => Err(crash),
        Err(Stop::Storage(error)) => {
            roll_back(connection);
            Ok(Reply::Unavailable(format!("storage error: {error}").into()))
        }
    }
}

/// The tables of a database's own schema, by name: every table but SQLite's (`sqlite_…`)
/// and the harness's (`retrysim_effects`, and names that begin `retrysim:`, which no
/// table of a user's needs). A user's `retrysimcounter` or `retrysim_keys` is the user's.
pub fn user_tables(keeper: &Connection) -> rusqlite::Result<Vec<String>> {
    keeper
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> 'retrysim_effects' \
             AND name NOT LIKE 'retrysim:%' ORDER BY name",
        )?
        .query_map([], |row| row.get(0))?
        .collect()
}

/// The rows of `table` in rowid order (or key order without rowids), each as its values
/// joined by commas.
pub fn table_rows(keeper: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = keeper.prepare_cached(&format!("SELECT * FROM \"{table}\""))?;
    let columns = statement.column_count();
    let mut rows = statement.query([])?;
    let mut described = Vec::new();
    while let Some(row) = rows.next()? {
        let values: Vec<String> = (0..columns)
            .map(|column| row.get::<_, rusqlite::types::Value>(column).map(show))
            .collect::<rusqlite::Result<_>>()?;
        described.push(values.join(","));
    }
    Ok(described)
}

/// A value as timelines show it: `null`, the number, the text, or `<N bytes>`.
fn show(value: rusqlite::types::Value) -> String {
    use rusqlite::types::Value;
    match value {
        Value::Null => "null".into(),
        Value::Integer(integer) => integer.to_string(),
        Value::Real(real) => real.to_string(),
        Value::Text(text) => text,
        Value::Blob(blob) => format!("<{} bytes>", blob.len()),
    }
}
