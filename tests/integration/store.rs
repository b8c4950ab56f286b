//! The harness database's copies and versions, which exhaustive checks rely on to resume runs
//! from checkpoints and to skip reading a store that did not change.

use retrysim::sqlite::rusqlite::types::Value;
use retrysim::sqlite::HarnessDb;
use retrysim::IntentTag;

const SCHEMA: &str = "
CREATE TABLE counter (id INTEGER PRIMARY KEY, total INTEGER NOT NULL);
CREATE TABLE notes (key TEXT PRIMARY KEY NOT NULL, body TEXT NOT NULL);
CREATE TABLE pairs (a TEXT NOT NULL, b TEXT NOT NULL, PRIMARY KEY (a, b)) WITHOUT ROWID;
INSERT INTO counter VALUES (1, 0);
";

fn database() -> HarnessDb {
    HarnessDb::create(&IntentTag::default(), SCHEMA, &["counter", "notes"]).unwrap()
}

fn rows(db: &HarnessDb, sql: &str) -> Vec<String> {
    let mut statement = db.keeper().prepare(sql).unwrap();
    let rows = statement
        .query_map([], |row| {
            let first: Value = row.get(0)?;
            let second: Value = row.get(1)?;
            Ok(format!("{first:?} {second:?}"))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
fn a_restored_database_has_the_saved_rows_and_rowids() {
    let db = database();
    let server = db.server();
    server
        .execute_batch(
            "INSERT INTO notes VALUES ('a', 'first'), ('b', 'second');
             DELETE FROM notes WHERE key = 'a';
             INSERT INTO notes VALUES ('c', 'third');
             INSERT INTO pairs VALUES ('x', 'y');
             UPDATE counter SET total = 7;",
        )
        .unwrap();
    let saved = db.save();
    let notes_then = rows(&db, "SELECT rowid, key FROM notes ORDER BY rowid");
    let fingerprint_then = db.fingerprint(&["counter", "notes", "pairs"]);

    server
        .execute_batch(
            "DELETE FROM notes; DELETE FROM pairs; UPDATE counter SET total = 99;
             INSERT INTO notes VALUES ('z', 'other');",
        )
        .unwrap();
    assert_ne!(
        db.fingerprint(&["counter", "notes", "pairs"]),
        fingerprint_then
    );

    db.restore(&saved);
    // Rowids matter: the next insert's rowid and the fingerprint both depend on them.
    assert_eq!(
        rows(&db, "SELECT rowid, key FROM notes ORDER BY rowid"),
        notes_then
    );
    assert_eq!(
        notes_then,
        vec!["Integer(2) Text(\"b\")", "Integer(3) Text(\"c\")"]
    );
    assert_eq!(
        rows(&db, "SELECT a, b FROM pairs"),
        vec!["Text(\"x\") Text(\"y\")"]
    );
    assert_eq!(
        db.fingerprint(&["counter", "notes", "pairs"]),
        fingerprint_then
    );
    assert_eq!(db.save(), saved);
}

#[test]
fn the_version_moves_with_every_kind_of_write_and_stays_for_reads() {
    let db = database();
    let server = db.server();
    let writes = [
        "INSERT INTO notes VALUES ('a', 'first')",
        "UPDATE counter SET total = 1",
        // A DELETE without WHERE takes SQLite's truncate shortcut.
        "DELETE FROM notes",
        "INSERT INTO pairs VALUES ('x', 'y')",
        "BEGIN IMMEDIATE; UPDATE counter SET total = 2; COMMIT",
        // Rolled back: the store is as it was, but the version may move (it errs that way).
        "BEGIN IMMEDIATE; UPDATE counter SET total = 3; ROLLBACK",
    ];
    for sql in writes {
        let before = db.version();
        server.execute_batch(sql).unwrap();
        assert_ne!(db.version(), before, "{sql}");
    }
    let reads = [
        "SELECT * FROM counter",
        "BEGIN IMMEDIATE; SELECT * FROM notes; COMMIT",
        "UPDATE counter SET total = total WHERE id = 42",
    ];
    for sql in reads {
        let before = db.version();
        server.execute_batch(sql).unwrap();
        assert_eq!(db.version(), before, "{sql}");
    }
    // The keeper (fixtures, admin events) and other connections count too.
    let before = db.version();
    db.keeper()
        .execute_batch("UPDATE counter SET total = 4")
        .unwrap();
    assert_ne!(db.version(), before);
    let other = db.connect().unwrap();
    let before = db.version();
    other.execute_batch("DELETE FROM pairs").unwrap();
    assert_ne!(db.version(), before);
}

/// What `connection` reads of the counter and the notes.
fn seen_by(connection: &retrysim::sqlite::rusqlite::Connection) -> (i64, Vec<String>) {
    let total = connection
        .query_row("SELECT total FROM counter", [], |row| row.get(0))
        .unwrap();
    let mut statement = connection
        .prepare("SELECT key FROM notes ORDER BY rowid")
        .unwrap();
    let keys = statement.query_map([], |row| row.get(0)).unwrap();
    (total, keys.map(Result::unwrap).collect())
}

#[test]
fn every_connection_reads_the_restored_database_and_writes_on_from_it() {
    let db = database();
    let server = db.server();
    let other = db.connect().unwrap();
    server
        .execute_batch("INSERT INTO notes VALUES ('a', 'first'); UPDATE counter SET total = 1;")
        .unwrap();
    let saved = db.save();
    for round in 2..5 {
        // Each round's write takes the file from the same restored one to another content:
        // `other`, which reads only then, must not take this round's file for the last's
        // (SQLite tells files apart by their change counters).
        server
            .execute_batch(&format!(
                "INSERT INTO notes VALUES ('r{round}', 'later'); UPDATE counter SET total = {round};"
            ))
            .unwrap();
        assert_eq!(seen_by(&other).0, round);
        let before = db.version();
        db.restore(&saved);
        assert_ne!(db.version(), before, "a restore moves the version");
        for connection in [db.keeper(), server] {
            assert_eq!(seen_by(connection), (1, vec!["a".to_string()]));
        }
    }
    assert_eq!(seen_by(&other), (1, vec!["a".to_string()]));
    // Writes go on from the restored file, and every connection sees them.
    other
        .execute_batch("INSERT INTO notes VALUES ('b', 'second')")
        .unwrap();
    assert_eq!(seen_by(server), (1, vec!["a".to_string(), "b".to_string()]));
}
