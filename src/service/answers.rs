//! Values a call takes from an earlier call's answer: `POST /orders`, then
//! `POST /orders/{1:/body/id}/pay`, the order's id in the path as the client received it.
//!
//! A reference is written `{N:POINTER}` in a call's path, body, headers or (over MCP) its
//! arguments: `N` an earlier call of the same client (counted from 1, as `key_of` counts),
//! `POINTER` a JSON pointer into the whole answer that client concluded that call on (over
//! HTTP `{"status": 201, "headers": {...}, "body": {...}}`, header names in lower case, so a
//! `Location` is `/headers/location`; over MCP the tool's result). A string that is one
//! reference becomes the value itself (a number stays a number); a reference inside a longer
//! string, or in the path, becomes the value's text. A call that builds on a call its client
//! did not conclude with a success is not sent.

use serde_json::Value;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// What a client received in a successful answer: its value (at the target's value pointer),
/// by which answers are compared, judged and hashed, and the whole answer, which later calls
/// may take values from ([`crate::service::Call`]'s references).
#[derive(Clone, Debug)]
pub struct Answer {
    /// The value, as JSON text.
    pub value: String,
    /// The whole answer the value was read from.
    pub whole: Arc<Value>,
}

impl Answer {
    /// An answer whose value is `value`, read from `whole`.
    pub fn new(value: String, whole: Value) -> Answer {
        Answer {
            value,
            whole: Arc::new(whole),
        }
    }
}

impl PartialEq for Answer {
    fn eq(&self, other: &Answer) -> bool {
        self.value == other.value
    }
}

impl Eq for Answer {}

impl Hash for Answer {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.value.hash(state);
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.value)
    }
}

/// One reference in a text: the earlier call (counted from 1) and the pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Reference<'t> {
    /// The earlier call, counted from 1.
    pub(super) call: usize,
    /// The JSON pointer into its answer (`""` for the whole answer).
    pub(super) pointer: &'t str,
    /// Where it is in the text, braces included.
    range: std::ops::Range<usize>,
}

impl Reference<'_> {
    /// Whether it is the whole of `text`, the string it was found in.
    pub(super) fn is_whole(&self, text: &str) -> bool {
        self.range == (0..text.len())
    }
}

/// The references in `text`, in order: each `{N:/...}` or `{N:}`, `N` digits.
pub(super) fn references(text: &str) -> Vec<Reference<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find('{').map(|at| from + at) {
        from = open + 1;
        let Some(close) = text[open..].find('}').map(|at| open + at) else {
            break;
        };
        let inside = &text[open + 1..close];
        let Some((number, pointer)) = inside.split_once(':') else {
            continue;
        };
        let numeric = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
        if !numeric || !(pointer.is_empty() || pointer.starts_with('/')) {
            continue;
        }
        let Ok(call) = number.parse() else { continue };
        found.push(Reference {
            call,
            pointer,
            range: open..close + 1,
        });
        from = close + 1;
    }
    found
}

/// The references anywhere in `value`'s strings (and its keys' none).
pub(super) fn references_in(value: &Value) -> Vec<Reference<'_>> {
    match value {
        Value::String(text) => references(text),
        Value::Array(values) => values.iter().flat_map(references_in).collect(),
        Value::Object(object) => object.values().flat_map(references_in).collect(),
        _ => Vec::new(),
    }
}

/// Checks the references of call `number` (counted from 1) of its client, in `field`: each
/// names an earlier call.
pub(super) fn check(
    field: &str,
    number: usize,
    references: &[Reference<'_>],
) -> Result<(), String> {
    match references.iter().find(|r| r.call == 0 || r.call >= number) {
        Some(reference) => Err(format!(
            "{field} takes a value from call {} ({{{}:{}}}): a call can take values from an \
             earlier call of its client only (1 to {})",
            reference.call,
            reference.call,
            reference.pointer,
            number - 1
        )),
        None => Ok(()),
    }
}

/// Why a reference cannot be resolved.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unresolved {
    /// The call it names did not succeed: the client never got its answer.
    NotAnswered,
    /// Its pointer matches nothing in the answer (a scenario or a server at fault).
    Unusable(String),
}

/// The value `reference` names among the answers the client's earlier calls succeeded with.
fn value_of(reference: &Reference<'_>, earlier: &[Option<&Answer>]) -> Result<Value, Unresolved> {
    let answer =
        (earlier.get(reference.call - 1).copied().flatten()).ok_or(Unresolved::NotAnswered)?;
    answer
        .whole
        .pointer(reference.pointer)
        .cloned()
        .ok_or_else(|| {
            let whole: String = answer.whole.to_string().chars().take(200).collect();
            Unresolved::Unusable(format!(
                "{{{}:{}}} matches nothing in call {}'s answer {whole}: point at a field its \
             successful answer has",
                reference.call, reference.pointer, reference.call
            ))
        })
}

/// A value's text where it stands inside a longer string: a string as it is, anything else
/// as JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `text` with each reference replaced by its value's text, passed through `escape`.
pub(super) fn resolved_text(
    text: &str,
    earlier: &[Option<&Answer>],
    escape: impl Fn(&str) -> String,
) -> Result<String, Unresolved> {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for reference in references(text) {
        out.push_str(&text[from..reference.range.start]);
        out.push_str(&escape(&text_of(&value_of(&reference, earlier)?)));
        from = reference.range.end;
    }
    out.push_str(&text[from..]);
    Ok(out)
}

/// `value` with its references resolved: a string that is one reference becomes the value,
/// a longer one takes the value's text.
pub(super) fn resolved(value: &Value, earlier: &[Option<&Answer>]) -> Result<Value, Unresolved> {
    Ok(match value {
        Value::String(text) => match references(text).as_slice() {
            [] => value.clone(),
            [one] if one.is_whole(text) => value_of(one, earlier)?,
            _ => Value::String(resolved_text(text, earlier, str::to_string)?),
        },
        Value::Array(values) => Value::Array(
            (values.iter())
                .map(|value| resolved(value, earlier))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(object) => Value::Object(
            (object.iter())
                .map(|(name, value)| Ok((name.clone(), resolved(value, earlier)?)))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// A value's text as it goes into a URL's path: unreserved characters as they are, every
/// other byte percent-encoded (RFC 3986 §2.3).
pub(crate) fn path_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn order() -> Answer {
        Answer::new(
            "500".into(),
            json!({"status": 201, "headers": {"location": "/orders/o 1"},
                   "body": {"id": "o 1", "total": 500}}),
        )
    }

    #[test]
    fn references_are_found_and_other_braces_left_alone() {
        let found = references(r#"/orders/{1:/body/id}/{x}{2:}{a:/b}{3:b}"#);
        let calls: Vec<(usize, &str)> = found.iter().map(|r| (r.call, r.pointer)).collect();
        assert_eq!(calls, [(1, "/body/id"), (2, "")]);
        assert!(references(r#"{"amount": 5}"#).is_empty());
        assert!(check("call 2's path", 2, &found[..1]).is_ok());
        let said = check("call 1's path", 1, &found[..1]).unwrap_err();
        assert!(said.contains("earlier call of its client only"), "{said}");
    }

    #[test]
    fn a_whole_reference_is_the_value_and_a_part_is_its_text() {
        let answer = order();
        let earlier = [Some(&answer)];
        let body = json!({"order": "{1:/body/id}", "total": "{1:/body/total}",
                          "note": "order {1:/body/id} of {1:/body/total}"});
        assert_eq!(
            resolved(&body, &earlier).unwrap(),
            json!({"order": "o 1", "total": 500, "note": "order o 1 of 500"})
        );
        let path = resolved_text("/orders/{1:/body/id}/pay", &earlier, path_escaped);
        assert_eq!(path.unwrap(), "/orders/o%201/pay");
        let location = resolved_text("{1:/headers/location}", &earlier, str::to_string);
        assert_eq!(location.unwrap(), "/orders/o 1");
    }

    #[test]
    fn a_reference_to_no_answer_or_to_nothing_is_unresolved() {
        let answer = order();
        assert_eq!(
            resolved(&json!("{1:/body/id}"), &[None]),
            Err(Unresolved::NotAnswered)
        );
        let Err(Unresolved::Unusable(why)) = resolved(&json!("{1:/body/nope}"), &[Some(&answer)])
        else {
            panic!("a pointer to nothing")
        };
        assert!(why.contains("matches nothing in call 1's answer"), "{why}");
    }

    #[test]
    fn answers_are_compared_and_hashed_by_their_value_alone() {
        let other = Answer::new("500".into(), json!({"body": {"id": "o 2"}}));
        assert_eq!(order(), other);
        assert_eq!(
            crate::fingerprint_of(&order()),
            crate::fingerprint_of(&other)
        );
        assert_eq!(order().to_string(), "500");
    }
}
