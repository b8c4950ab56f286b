//! Fresh values: what a server stores that differs between two runs of one schedule — a
//! `uuid4()` id, a wall-clock `created_at`, a random token. Two states that differ only in
//! such values have the same future (a server compares a fresh value for equality, it does
//! not compute with it), yet their fingerprints differ, so no state would ever repeat and
//! no check would finish. Before a check, the harness runs a schedule twice and compares the
//! server's tables token by token ([`FreshValues::learn`]); the shapes of the tokens that
//! differed are fresh, and from then on every token of a fresh shape is named by where it
//! first appears in the state ([`FreshValues::canonical`]), not by its value.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// The fewest characters a token has to be taken for a fresh value: a shorter one (an
/// amount, a count, a status) carries too little to be a fresh id, and may matter.
pub const FRESH_TOKEN_CHARS_MIN: usize = 8;

/// The fresh values learned for one scenario, shared by every clone of its target.
#[derive(Clone, Debug, Default)]
pub struct FreshValues(Arc<Mutex<Learned>>);

/// What [`FreshValues::learn`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// The shapes of the fresh tokens: punctuation kept, letters and digits as `h` (all hex) or `w`.
    pub shapes: BTreeSet<String>,
    /// The tables they were seen in, each with one of its fresh values.
    pub tables: BTreeMap<String, String>,
    /// One fresh value seen in the answers' values (where the scenario's `value` points), if
    /// any. Answers are not renamed as tables are: such a value keeps every state apart.
    pub answers: Option<String>,
}

impl FreshValues {
    /// Compares `first` and `second`, two descriptions of the server's tables (`name [rows]`
    /// for each) after two runs of one schedule, and learns the shapes of the
    /// tokens that differ. Descriptions that differ in more than some tokens' values (a row
    /// more, a value of another shape) teach nothing: that is not a fresh value, and the
    /// check's own replays name it.
    pub fn learn(&self, first: &str, second: &str) {
        let differing = differing_tokens(first, second);
        let mut learned = self.0.lock().expect("the fresh values");
        for (offset, token) in differing {
            learned.shapes.insert(shape(token));
            if let Some(table) = table_at(first, offset) {
                learned
                    .tables
                    .entry(table)
                    .or_insert_with(|| token.to_string());
            }
        }
    }

    /// Compares the answers' values of two runs of one schedule (`first` and `second`, each
    /// the answers in their order) and notes one that differs: a fresh id or timestamp the
    /// scenario's `value` takes in, which keeps every state apart. Nothing is renamed for it.
    pub fn learn_answers(&self, first: &str, second: &str) {
        if let Some((_, token)) = differing_tokens(first, second).first() {
            let mut learned = self.0.lock().expect("the fresh values");
            learned.answers.get_or_insert_with(|| token.to_string());
        }
    }

    /// What has been learned.
    pub fn learned(&self) -> Learned {
        self.0.lock().expect("the fresh values").clone()
    }

    /// `description` with every token of a fresh shape replaced by `?N`, N the order in
    /// which the distinct values first appear, once each table's rows are put in an order
    /// their fresh values do not set (by the row with them as `?`, then by where else each
    /// appears): two states that differ only in which fresh values they hold, not in where
    /// each repeats, read alike, whatever order their fresh ids put their rows in.
    pub fn canonical<'a>(&self, description: &'a str) -> Cow<'a, str> {
        self.rewritten(description, |is_fresh| {
            let ordered = rows_in_canonical_order(description, is_fresh, &|_| None);
            numbered(&ordered, is_fresh, &mut BTreeMap::new())
        })
    }

    /// `text`, a rendered timeline, as [`FreshValues::canonical`] writes a description: each
    /// description of the tables in it (a cell of the table, or what follows a label such as
    /// `store at end: `) with its rows in their own order, and every fresh token numbered
    /// through the whole text, cell after cell. Rows alike but for their fresh tokens are
    /// ordered by the numbers those tokens got earlier in the text (two orders placed alike
    /// by two attempts stay in the order their ids first appeared). Two replays of a tape
    /// that drew other ids read alike.
    pub fn canonical_timeline<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.rewritten(text, |is_fresh| {
            let mut names = BTreeMap::new();
            let mut lines = Vec::new();
            for line in text.split('\n') {
                let mut cells = Vec::new();
                for cell in line.split(" | ") {
                    let ordered = {
                        let known = |token: &str| names.get(token).copied();
                        cell_in_canonical_order(cell, is_fresh, &known)
                    };
                    cells.push(numbered(&ordered, is_fresh, &mut names));
                }
                lines.push(cells.join(" | "));
            }
            lines.join("\n")
        })
    }

    /// `text` as it is while nothing is learned fresh, else as `rewrite` writes it given
    /// whether a token is fresh.
    fn rewritten<'a>(
        &self,
        text: &'a str,
        rewrite: impl FnOnce(&dyn Fn(&str) -> bool) -> String,
    ) -> Cow<'a, str> {
        let learned = self.0.lock().expect("the fresh values");
        if learned.shapes.is_empty() {
            return Cow::Borrowed(text);
        }
        let is_fresh = |token: &str| {
            token.len() >= FRESH_TOKEN_CHARS_MIN && learned.shapes.contains(&shape(token))
        };
        Cow::Owned(rewrite(&is_fresh))
    }
}

/// `cell` with the description of tables it ends with (from its first `name [` that reads
/// as one to its end, less trailing padding) in its rows' own order.
fn cell_in_canonical_order(
    cell: &str,
    is_fresh: &dyn Fn(&str) -> bool,
    known: &dyn Fn(&str) -> Option<usize>,
) -> String {
    let content = cell.trim_end();
    let padding = &cell[content.len()..];
    let starts = (content.char_indices())
        .map(|(at, _)| at)
        .filter(|&at| at == 0 || content[..at].ends_with(' '));
    for start in starts {
        let described = &content[start..];
        if table_head(described).is_some() && sections(described).is_some() {
            let ordered = rows_in_canonical_order(described, is_fresh, known);
            return format!("{}{ordered}{padding}", &content[..start]);
        }
    }
    cell.to_string()
}

/// `text` with each fresh token (`is_fresh`) replaced by `?N`, N the order in which the
/// distinct values first appear, counting on from the tokens `names` has numbered already
/// (which it is given the new ones).
fn numbered(
    text: &str,
    is_fresh: &dyn Fn(&str) -> bool,
    names: &mut BTreeMap<String, usize>,
) -> String {
    let mut canonical = String::with_capacity(text.len());
    let mut copied_to = 0;
    for (offset, token) in tokens(text) {
        if !is_fresh(token) {
            continue;
        }
        let next = names.len();
        let name = *names.entry(token.to_string()).or_insert(next);
        canonical.push_str(&text[copied_to..offset]);
        canonical.push_str(&format!("?{name}"));
        copied_to = offset + token.len();
    }
    canonical.push_str(&text[copied_to..]);
    canonical
}

/// `text` with each fresh token replaced by `?`.
fn neutral(text: &str, is_fresh: &dyn Fn(&str) -> bool) -> String {
    let mut neutral = String::with_capacity(text.len());
    let mut copied_to = 0;
    for (offset, token) in tokens(text)
        .into_iter()
        .filter(|(_, token)| is_fresh(token))
    {
        neutral.push_str(&text[copied_to..offset]);
        neutral.push('?');
        copied_to = offset + token.len();
    }
    neutral.push_str(&text[copied_to..]);
    neutral
}

/// One table of a description: `name [` and its rows.
struct Section<'d> {
    head: &'d str,
    rows: Vec<&'d str>,
}

/// The tables of `description` (`name [row; row] name [row]`), or `None` where it does not
/// read back as that.
fn sections(description: &str) -> Option<Vec<Section<'_>>> {
    let starts: Vec<usize> = (description.char_indices())
        .map(|(at, _)| at)
        .filter(|&at| at == 0 || description[..at].ends_with("] "))
        .filter(|&at| table_head(&description[at..]).is_some())
        .collect();
    let mut found = Vec::with_capacity(starts.len());
    for (index, &start) in starts.iter().enumerate() {
        let end = starts
            .get(index + 1)
            .map_or(description.len(), |&next| next - 1);
        let section = &description[start..end];
        let head_len = table_head(section)?;
        let inner = section[head_len..].strip_suffix(']')?;
        let rows = if inner.is_empty() {
            Vec::new()
        } else {
            inner.split("; ").collect()
        };
        found.push(Section {
            head: &section[..head_len],
            rows,
        });
    }
    let rebuilt = joined(&found);
    (rebuilt == description).then_some(found)
}

/// The length of `name [` at the start of `text`, when it begins so.
fn table_head(text: &str) -> Option<usize> {
    let name_len = text
        .bytes()
        .take_while(|&byte| byte.is_ascii_alphanumeric() || byte == b'_')
        .count();
    (name_len > 0 && text[name_len..].starts_with(" [")).then_some(name_len + 2)
}

/// `sections` written back as a description.
fn joined(sections: &[Section<'_>]) -> String {
    let tables: Vec<String> = (sections.iter())
        .map(|section| format!("{}{}]", section.head, section.rows.join("; ")))
        .collect();
    tables.join(" ")
}

/// `description` with each table's rows in an order that does not depend on the values of
/// their fresh tokens: by the row with those tokens as `?`, then, between rows alike so, by
/// where else each of their fresh tokens appears (the other rows, so written, that hold
/// it), then by the numbers `known` gave their fresh tokens before (none last). A
/// description that does not read as tables is kept as it is.
fn rows_in_canonical_order(
    description: &str,
    is_fresh: &dyn Fn(&str) -> bool,
    known: &dyn Fn(&str) -> Option<usize>,
) -> String {
    let Some(mut tables) = sections(description) else {
        return description.to_string();
    };
    // Every row, by table and place, with its neutral form and its fresh tokens.
    let mut holders: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for table in &tables {
        for row in &table.rows {
            let written = format!("{}{}", table.head, neutral(row, is_fresh));
            for (_, token) in tokens(row).into_iter().filter(|(_, t)| is_fresh(t)) {
                holders.entry(token).or_default().push(written.clone());
            }
        }
    }
    for table in &mut tables {
        let head = table.head;
        table.rows.sort_by_cached_key(|row| {
            let written = format!("{head}{}", neutral(row, is_fresh));
            let elsewhere: Vec<Vec<String>> = (tokens(row).into_iter())
                .filter(|(_, token)| is_fresh(token))
                .map(|(_, token)| {
                    let mut others = holders.get(token).cloned().unwrap_or_default();
                    if let Some(own) = others.iter().position(|other| *other == written) {
                        others.remove(own);
                    }
                    others.sort();
                    others
                })
                .collect();
            let mut numbers: Vec<usize> = (tokens(row).into_iter())
                .filter(|(_, token)| is_fresh(token))
                .map(|(_, token)| known(token).unwrap_or(usize::MAX))
                .collect();
            numbers.sort_unstable();
            (written, elsewhere, numbers)
        });
    }
    joined(&tables)
}

impl Learned {
    /// One line for the report, or `None` when nothing is fresh. A value is shown by its
    /// shape, not as it is: the report of one schedule reads alike whatever values the
    /// server drew.
    pub fn line(&self) -> Option<String> {
        let tables: Vec<String> = (self.tables.iter())
            .map(|(table, example)| format!("{table} (`{}`)", shape(example)))
            .collect();
        let tables = (!tables.is_empty()).then(|| {
            format!(
                "fresh values: {} hold values that differ between two runs of one schedule \
                 (shown by their shape, h a hex digit, w a letter or digit, f a fraction); \
                 states are told apart by where each repeats, not by its value",
                tables.join(", ")
            )
        });
        let answers = self.answers.as_ref().map(|example| {
            format!(
                "warning: the answers' values hold a value that differs between two runs of \
                 one schedule (shaped `{}`): answers are compared whole, so no state \
                 with it repeats and the check may not end; point `value` at the fields \
                 that do not change (several pointers: value = [\"/status\", \"/body/item\"])",
                shape(example)
            )
        });
        match (tables, answers) {
            (Some(tables), Some(answers)) => Some(format!("{tables}. {answers}")),
            (tables, answers) => tables.or(answers),
        }
    }
}

/// The tokens of `first` (with their byte offsets) that differ from those of `second` at
/// the same place and have the same shape and a fresh value's length; none when the two
/// have different numbers of tokens (then they differ in more than values).
fn differing_tokens<'t>(first: &'t str, second: &str) -> Vec<(usize, &'t str)> {
    let (first_tokens, second_tokens) = (tokens(first), tokens(second));
    if first_tokens.len() != second_tokens.len() {
        return Vec::new();
    }
    (first_tokens.iter().zip(&second_tokens))
        .filter(|((_, one), (_, other))| one != other)
        .filter(|((_, one), (_, other))| shape(one) == shape(other))
        .filter(|((_, one), _)| one.len() >= FRESH_TOKEN_CHARS_MIN)
        .map(|(&first, _)| first)
        .collect()
}

/// The tokens of `text` with their byte offsets: runs of letters, digits and `-_.:+`.
fn tokens(text: &str) -> Vec<(usize, &str)> {
    let is_token_byte = |byte: u8| byte.is_ascii_alphanumeric() || b"-_.:+".contains(&byte);
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut start = None;
    for (offset, &byte) in bytes.iter().enumerate() {
        match (is_token_byte(byte), start) {
            (true, None) => start = Some(offset),
            (false, Some(begun)) => {
                found.push((begun, &text[begun..offset]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(begun) = start {
        found.push((begun, &text[begun..]));
    }
    found
}

/// A token's shape: its punctuation kept, each letter or digit an `h` when all of them are
/// hexadecimal digits (a uuid, a hex token, a number), a `w` otherwise (a timestamp with its
/// `T`, a base-64 token). The digits after a `.` are one `f` however many they are: a
/// timestamp's fraction of a second, which PostgreSQL writes without its trailing zeros
/// (`12:28:49.512+00` and `12:15:19.215566+00` are one shape).
fn shape(token: &str) -> String {
    let all_hex = token
        .bytes()
        .filter(u8::is_ascii_alphanumeric)
        .all(|byte| byte.is_ascii_hexdigit());
    let class = if all_hex { 'h' } else { 'w' };
    let mut shape = String::with_capacity(token.len());
    let mut previous = ' ';
    let mut in_fraction = false;
    for c in token.chars() {
        if previous == '.' && c.is_ascii_digit() {
            in_fraction = true;
            shape.push('f');
        } else if !(in_fraction && c.is_ascii_digit()) {
            in_fraction = false;
            shape.push(if c.is_ascii_alphanumeric() { class } else { c });
        }
        previous = c;
    }
    shape
}

/// The table whose rows `description` (`name [rows] name [rows] ...`) lists at `offset`:
/// the last `name [` before it that begins the description or follows a `] `.
fn table_at(description: &str, offset: usize) -> Option<String> {
    let before = &description[..offset];
    let mut end = before.len();
    while let Some(bracket) = before[..end].rfind(" [") {
        let start = before[..bracket].rfind("] ").map_or(0, |at| at + 2);
        let name = &before[start..bracket];
        let is_name = !name.is_empty()
            && (name.bytes()).all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
        if is_name {
            return Some(name.to_string());
        }
        end = bracket;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID_A: &str = "3f2a8c1e-5b7d-4e9f-a1c3-0d2e4f6a8b9c";
    const UUID_B: &str = "9c8b7a6f-5e4d-4c3b-b2a1-f0e9d8c7b6a5";
    const UUID_C: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    fn learned_from_uuids() -> FreshValues {
        let fresh = FreshValues::default();
        fresh.learn(
            &format!("charges [{UUID_A},5] keys [k1,{{\"id\": \"{UUID_A}\", \"total\": 5}}]"),
            &format!("charges [{UUID_B},5] keys [k1,{{\"id\": \"{UUID_B}\", \"total\": 5}}]"),
        );
        fresh
    }

    #[test]
    fn a_value_that_differs_between_two_runs_of_one_schedule_is_fresh() {
        let learned = learned_from_uuids().learned();
        assert_eq!(learned.shapes.len(), 1, "{learned:?}");
        assert_eq!(
            learned.tables.keys().collect::<Vec<_>>(),
            ["charges", "keys"]
        );
        let line = learned.line().unwrap();
        assert!(
            !line.contains(UUID_A),
            "the value itself differs per run: {line}"
        );
        assert!(
            line.contains("charges (`hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh`)"),
            "{line}"
        );
    }

    #[test]
    fn a_fresh_value_in_the_answers_is_named_and_teaches_no_shape() {
        let fresh = FreshValues::default();
        fresh.learn_answers(
            &format!("succeeded {{\"id\":\"{UUID_A}\",\"amount\":5}}"),
            &format!("succeeded {{\"id\":\"{UUID_B}\",\"amount\":5}}"),
        );
        let learned = fresh.learned();
        assert_eq!(learned.answers.as_deref(), Some(UUID_A));
        assert!(learned.shapes.is_empty() && learned.tables.is_empty());
        let line = learned.line().unwrap();
        assert!(line.starts_with("warning: the answers' values"), "{line}");
        // Answers alike (an amount that differs is no fresh value) teach nothing.
        let alike = FreshValues::default();
        alike.learn_answers("succeeded 5", "succeeded 7");
        assert_eq!(alike.learned().line(), None);
    }

    #[test]
    fn states_that_differ_only_in_fresh_values_read_alike_and_others_do_not() {
        let fresh = learned_from_uuids();
        let state = |id: &str, total: u32| {
            fresh
                .canonical(&format!(
                    "charges [{id},{total}] keys [k1,{{\"id\": \"{id}\", \"total\": {total}}}]"
                ))
                .into_owned()
        };
        assert_eq!(state(UUID_A, 5), state(UUID_C, 5));
        assert_ne!(
            state(UUID_A, 5),
            state(UUID_A, 12),
            "a total is no fresh value"
        );
        // Where a fresh value repeats is kept: the key's answer names another charge.
        let crossed = fresh
            .canonical(&format!(
                "charges [{UUID_A},5] keys [k1,{{\"id\": \"{UUID_C}\", \"total\": 5}}]"
            ))
            .into_owned();
        assert_ne!(crossed, state(UUID_A, 5));
    }

    #[test]
    fn short_tokens_and_tables_that_differ_in_shape_teach_nothing() {
        let fresh = FreshValues::default();
        fresh.learn("counter [1,5]", "counter [1,12]");
        fresh.learn("counter [1,5]", "counter [1,5] [2,7]");
        assert_eq!(fresh.learned(), Learned::default());
        assert_eq!(fresh.canonical("counter [1,5]"), "counter [1,5]");
    }

    #[test]
    fn timestamps_are_fresh_by_their_shape() {
        let fresh = FreshValues::default();
        fresh.learn(
            "charges [1,2026-12-06T08:33:38.123456+00:00]",
            "charges [1,2026-12-06T08:33:39.654321+00:00]",
        );
        assert_eq!(
            fresh.canonical("charges [1,2026-12-07T10:00:00.000001+00:00]"),
            "charges [1,?0]"
        );
    }

    #[test]
    fn rows_that_fresh_ids_put_in_another_order_read_alike() {
        let fresh = learned_from_uuids();
        let rows = |first: &str, second: &str| {
            let key = format!("keys [(k1,{{\"id\": \"{second}\", \"total\": 5}})]");
            let described = format!("charges [({first},5); ({second},5)] {key}");
            fresh.canonical(&described).into_owned()
        };
        // The same two charges of 5, the key's answer naming the one drawn second, in
        // either order of their ids: alike.
        assert_eq!(rows(UUID_A, UUID_B), rows(UUID_C, UUID_B));
        let swapped = |first: &str, second: &str| {
            let key = format!("keys [(k1,{{\"id\": \"{first}\", \"total\": 5}})]");
            fresh
                .canonical(&format!("charges [({first},5); ({second},5)] {key}"))
                .into_owned()
        };
        assert_eq!(rows(UUID_A, UUID_C), swapped(UUID_C, UUID_A));
        // Another amount is another state.
        let state = |second_amount: u32| {
            let described = format!("charges [({UUID_A},5); ({UUID_B},{second_amount})] keys []");
            fresh.canonical(&described).into_owned()
        };
        assert_ne!(state(7), state(5));
    }

    #[test]
    fn a_description_that_is_no_tables_is_numbered_as_it_is() {
        let fresh = learned_from_uuids();
        let text = format!("(unreadable: {UUID_A}) é");
        assert_eq!(fresh.canonical(&text), "(unreadable: ?0) é");
    }

    #[test]
    fn two_replays_whose_ids_sort_their_rows_otherwise_read_alike_in_a_timeline() {
        let fresh = learned_from_uuids();
        // The charge of 700 is the key's; its id sorts before or after the other's.
        let timeline = |low: &str, high: &str, kept: &str| {
            let store = format!(
                "charges [({low},{}); ({high},{})] keys [(r1,{{\"id\": \"{kept}\"}})]",
                if kept == low { 700 } else { 500 },
                if kept == high { 700 } else { 500 },
            );
            let text = format!("8 | 2100 | {store}    | c1 B: unknown\nstore at end: {store}");
            fresh.canonical_timeline(&text).into_owned()
        };
        assert_eq!(
            timeline(UUID_C, UUID_B, UUID_B),
            timeline(UUID_A, UUID_B, UUID_A)
        );
        // The key naming the charge of 500 instead is another state.
        let other = format!("8 | 2100 | charges [({UUID_C},500); ({UUID_B},700)] keys [(r1,{{\"id\": \"{UUID_C}\"}})]");
        let other = fresh.canonical_timeline(&other).into_owned();
        assert_ne!(
            timeline(UUID_C, UUID_B, UUID_B).lines().next(),
            other.lines().next()
        );
    }

    #[test]
    fn a_fraction_of_a_second_is_one_shape_whatever_its_digits() {
        assert_eq!(shape("12:28:49.512+00"), shape("12:15:19.215566+00"));
        assert_eq!(shape("12:28:49.512+00"), "hh:hh:hh.f+hh");
        assert_ne!(shape("12:28:49+00"), shape("12:28:49.5+00"));
        assert_eq!(shape(UUID_A), shape(UUID_B));
    }
}
