//! What the relay reads in a statement's text: its kind (by its first word), whether it
//! writes or locks, the name a point takes from it, and the statements of a simple query that
//! holds several.

/// The longest name a statement gives a point, in characters.
pub const NAME_CHARS_MAX: usize = 60;

/// The statements of a simple query's text, split at each `;` outside a string, a quoted
/// name, a dollar-quoted body and a comment, each without its `;`; empty ones left out. A
/// text it cannot split (an unterminated quote) is one statement to its end: it is passed on
/// as it is, and the cluster says what is wrong with it.
pub(super) fn statements(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut start = 0;
    let mut rest = text.char_indices().peekable();
    while let Some((at, c)) = rest.next() {
        let closing = match c {
            '\'' => Some("'".to_string()),
            '"' => Some("\"".to_string()),
            '-' if rest.peek().is_some_and(|(_, n)| *n == '-') => Some("\n".to_string()),
            '/' if rest.peek().is_some_and(|(_, n)| *n == '*') => Some("*/".to_string()),
            '$' => dollar_tag(&text[at..]),
            ';' => {
                found.push(&text[start..at]);
                start = at + 1;
                None
            }
            _ => None,
        };
        if let Some(closing) = closing {
            let opened = if c == '$' { closing.len() } else { 1 };
            let from = at + opened;
            let end = text[from..]
                .find(&closing)
                .map_or(text.len(), |found| from + found + closing.len());
            while rest.peek().is_some_and(|(next, _)| *next < end) {
                rest.next();
            }
        }
    }
    found.push(&text[start..]);
    found.retain(|statement| !strip_comments(statement).trim().is_empty());
    found
}

/// The tag that opens a dollar-quoted body at the start of `text` (`$$`, `$body$`), if one
/// does (not a parameter such as `$1`).
fn dollar_tag(text: &str) -> Option<String> {
    let inner: String = text[1..]
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let opens = !inner.starts_with(|c: char| c.is_ascii_digit())
        && text[1 + inner.len()..].starts_with('$');
    opens.then(|| format!("${inner}$"))
}

/// What a statement is, for the points around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StatementKind {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END`.
    Commit,
    /// `ROLLBACK`, `ABORT`.
    Rollback,
    /// A statement that reads or writes no row: `SET`, `SHOW`, `SAVEPOINT`, `DISCARD` ….
    Quiet,
    /// Any other.
    Statement,
}

/// The text a statement is taken to have when it is executed by a name the relay does not
/// know (it was prepared before the relay kept it): a statement that may write.
pub const UNKNOWN_STATEMENT: &str = "(a statement prepared out of the relay's sight)";

/// The kind of the statement `text` (by its first word).
pub(super) fn kind_of(text: &str) -> StatementKind {
    if text == UNKNOWN_STATEMENT {
        return StatementKind::Statement;
    }
    let first: String = strip_comments(text)
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    match first.as_str() {
        "BEGIN" | "START" => StatementKind::Begin,
        "COMMIT" | "END" => StatementKind::Commit,
        "ROLLBACK" | "ABORT" => StatementKind::Rollback,
        "" | "SET" | "SHOW" | "RESET" | "SAVEPOINT" | "RELEASE" | "DISCARD" | "DEALLOCATE"
        | "LISTEN" | "UNLISTEN" | "PREPARE" | "CLOSE" => StatementKind::Quiet,
        "SELECT" if reads_no_table(text) => StatementKind::Quiet,
        _ => StatementKind::Statement,
    }
}

/// Whether a `SELECT` reads no table and takes no lock: a pool's ping (`SELECT 1`), a
/// driver's look at the server (`select pg_catalog.version()`, `select current_schema()`),
/// a sequence's next value. Nothing another request does can change what it sees.
fn reads_no_table(text: &str) -> bool {
    let upper = text.to_ascii_uppercase();
    !locks(text) && !upper.contains("FROM") && !upper.contains("INTO")
}

/// `text` without its leading `--` and `/* */` comments.
fn strip_comments(text: &str) -> &str {
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after
                .split_once('\n')
                .map_or("", |(_, next)| next)
                .trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after
                .split_once("*/")
                .map_or("", |(_, next)| next)
                .trim_start();
        } else {
            return rest;
        }
    }
}

/// Whether `text` is a `SELECT`, by its first word.
pub(super) fn selects(text: &str) -> bool {
    first_word_is(text, &["SELECT"])
}

/// Whether the first word of `text` is one of `words` (any case).
fn first_word_is(text: &str, words: &[&str]) -> bool {
    let first: String = (strip_comments(text).chars())
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    words.iter().any(|word| first.eq_ignore_ascii_case(word))
}

/// Whether `text` is a statement that modifies rows, by its first word.
pub(super) fn modifies(text: &str) -> bool {
    first_word_is(text, &["INSERT", "UPDATE", "DELETE", "MERGE"])
}

/// Whether `text` takes row or advisory locks that its commit lets go.
pub(super) fn locks(text: &str) -> bool {
    let upper = text.to_ascii_uppercase();
    // An advisory lock taken (not `pg_advisory_unlock_all()`, a pool's reset on release).
    [
        "FOR UPDATE",
        "FOR SHARE",
        "FOR NO KEY UPDATE",
        "FOR KEY SHARE",
        "PG_ADVISORY_LOCK",
        "PG_ADVISORY_XACT_LOCK",
        "PG_TRY_ADVISORY",
    ]
    .iter()
    .any(|words| upper.contains(words))
}

/// Whether a `CommandComplete` tag says rows or the schema changed.
pub(super) fn tag_wrote(tag: &str) -> bool {
    let first = tag.split_whitespace().next().unwrap_or_default();
    let rows = tag.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok());
    match first {
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "COPY" => rows.is_some_and(|n| n > 0),
        "CREATE" | "ALTER" | "DROP" | "TRUNCATE" | "COMMENT" | "GRANT" | "REVOKE" => true,
        _ => false,
    }
}

/// The name a statement gives a point: its text with literals left out, spaces folded,
/// quoted and cut at [`NAME_CHARS_MAX`] characters.
pub fn statement_name(text: &str) -> String {
    let mut folded = String::new();
    let mut chars = strip_comments(text).chars().peekable();
    let mut last = ' ';
    while let Some(c) = chars.next() {
        let piece: Option<String> = match c {
            '\'' => {
                // A string literal ('' inside is a quote): one mark for all of it.
                while let Some(next) = chars.next() {
                    if next == '\'' && chars.peek() != Some(&'\'') {
                        break;
                    }
                    if next == '\'' {
                        chars.next();
                    }
                }
                Some("'…'".into())
            }
            c if c.is_ascii_digit() && !(last.is_alphanumeric() || last == '_' || last == '$') => {
                while chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_digit() || *n == '.')
                {
                    chars.next();
                }
                Some("N".into())
            }
            c if c.is_whitespace() => (last != ' ').then(|| " ".into()),
            c => Some(c.to_string()),
        };
        if let Some(piece) = piece {
            last = piece.chars().last().unwrap_or(' ');
            folded.push_str(&piece);
        }
    }
    let folded = folded.trim().trim_end_matches(';').trim_end();
    let cut: String = folded.chars().take(NAME_CHARS_MAX).collect();
    if cut.chars().count() < folded.chars().count() {
        format!("\"{cut}…\"")
    } else {
        format!("\"{cut}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_named_without_its_values() {
        assert_eq!(
            statement_name("SELECT response FROM orders\n  WHERE key = $1 AND n > 10"),
            "\"SELECT response FROM orders WHERE key = $1 AND n > N\""
        );
        assert_eq!(
            statement_name("INSERT INTO t2 (a) VALUES ('it''s', 3.5);"),
            "\"INSERT INTO t2 (a) VALUES ('…', N)\""
        );
        let long = statement_name(&format!("SELECT {} FROM t", "a, ".repeat(40)));
        assert!(long.ends_with("…\""), "{long}");
        assert_eq!(long.chars().count(), NAME_CHARS_MAX + 3);
    }

    #[test]
    fn statements_are_told_apart_by_their_first_word() {
        assert_eq!(
            kind_of("begin isolation level serializable"),
            StatementKind::Begin
        );
        assert_eq!(kind_of("/* x */ COMMIT"), StatementKind::Commit);
        assert_eq!(kind_of("-- note\nROLLBACK"), StatementKind::Rollback);
        assert_eq!(kind_of("SET search_path = x"), StatementKind::Quiet);
        assert_eq!(
            kind_of("WITH x AS (SELECT 1) SELECT * FROM x"),
            StatementKind::Statement
        );
        assert_eq!(kind_of("SELECT 1"), StatementKind::Quiet);
        let reset = "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;";
        assert_eq!(kind_of(reset), StatementKind::Quiet);
        assert_eq!(kind_of("select pg_catalog.version()"), StatementKind::Quiet);
        assert_eq!(
            kind_of("SELECT total FROM counter"),
            StatementKind::Statement
        );
        assert_eq!(
            kind_of("SELECT pg_advisory_xact_lock(hashtext($1))"),
            StatementKind::Statement
        );
    }

    #[test]
    fn a_simple_query_is_split_into_its_statements() {
        assert_eq!(
            statements("BEGIN; INSERT INTO t VALUES ('a;b'); COMMIT;"),
            ["BEGIN", " INSERT INTO t VALUES ('a;b')", " COMMIT"]
        );
        assert_eq!(
            statements("SELECT \"x;y\" FROM t -- a; note\n; SELECT $1"),
            ["SELECT \"x;y\" FROM t -- a; note\n", " SELECT $1"]
        );
        assert_eq!(
            statements("DO $body$ BEGIN PERFORM 1; END $body$; /* ; */ SELECT 2"),
            ["DO $body$ BEGIN PERFORM 1; END $body$", " /* ; */ SELECT 2"]
        );
        assert_eq!(statements("SELECT 'open; COMMIT"), ["SELECT 'open; COMMIT"]);
        assert_eq!(statements(";  ;"), Vec::<&str>::new());
        assert_eq!(statements("SELECT 1"), ["SELECT 1"]);
    }

    #[test]
    fn a_statement_prepared_out_of_sight_may_write() {
        assert_eq!(kind_of(UNKNOWN_STATEMENT), StatementKind::Statement);
    }

    #[test]
    fn a_tag_says_whether_rows_changed() {
        assert!(tag_wrote("INSERT 0 1"));
        assert!(!tag_wrote("INSERT 0 0"));
        assert!(tag_wrote("UPDATE 2"));
        assert!(!tag_wrote("UPDATE 0"));
        assert!(!tag_wrote("SELECT 1"));
        assert!(tag_wrote("CREATE TABLE"));
    }
}
