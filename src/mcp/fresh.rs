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
}

impl FreshValues {
    /// Compares `first` and `second`, two descriptions of the server's tables (`name [rows]`
    /// for each) after two runs of one schedule, and learns the shapes of the
    /// tokens that differ. Descriptions that differ in more than some tokens' values (a row
    /// more, a value of another shape) teach nothing: that is not a fresh value, and the
    /// check's own replays name it.
    pub fn learn(&self, first: &str, second: &str) {
        let (first_tokens, second_tokens) = (tokens(first), tokens(second));
        if first_tokens.len() != second_tokens.len() {
            return;
        }
        let differing: Vec<(usize, &str)> = (first_tokens.iter().zip(&second_tokens))
            .filter(|((_, one), (_, other))| one != other)
            .filter(|((_, one), (_, other))| shape(one) == shape(other))
            .filter(|((_, one), _)| one.len() >= FRESH_TOKEN_CHARS_MIN)
            .map(|(&first, _)| first)
            .collect();
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

    /// What has been learned.
    pub fn learned(&self) -> Learned {
        self.0.lock().expect("the fresh values").clone()
    }

    /// `description` with every token of a fresh shape replaced by `?N`, N the order in
    /// which the distinct values first appear: two states that differ only in which fresh
    /// values they hold, not in where each repeats, read alike.
    pub fn canonical<'a>(&self, description: &'a str) -> Cow<'a, str> {
        let learned = self.0.lock().expect("the fresh values");
        if learned.shapes.is_empty() {
            return Cow::Borrowed(description);
        }
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut canonical = String::with_capacity(description.len());
        let mut copied_to = 0;
        for (offset, token) in tokens(description) {
            if token.len() < FRESH_TOKEN_CHARS_MIN || !learned.shapes.contains(&shape(token)) {
                continue;
            }
            let next = names.len();
            let name = *names.entry(token).or_insert(next);
            canonical.push_str(&description[copied_to..offset]);
            canonical.push_str(&format!("?{name}"));
            copied_to = offset + token.len();
        }
        canonical.push_str(&description[copied_to..]);
        Cow::Owned(canonical)
    }
}

impl Learned {
    /// One line for the report, or `None` when nothing is fresh.
    pub fn line(&self) -> Option<String> {
        if self.tables.is_empty() {
            return None;
        }
        let tables: Vec<String> = (self.tables.iter())
            .map(|(table, example)| format!("{table} (e.g. `{example}`)"))
            .collect();
        Some(format!(
            "fresh values: {} hold values that differ between two runs of one schedule; \
             states are told apart by where each repeats, not by its value",
            tables.join(", ")
        ))
    }
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
/// `T`, a base-64 token).
fn shape(token: &str) -> String {
    let all_hex = token
        .bytes()
        .filter(u8::is_ascii_alphanumeric)
        .all(|byte| byte.is_ascii_hexdigit());
    let class = if all_hex { 'h' } else { 'w' };
    token
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { class } else { c })
        .collect()
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
        assert!(learned.line().unwrap().contains(UUID_A), "{learned:?}");
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
}
