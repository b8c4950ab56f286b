//! Headers an HTTP scenario's calls send besides the key: an `Authorization` bearer, a
//! tenant, an API version. A scenario gives them under `[server]` (every call), a
//! `[[client]]` (each of its calls) or a call, the nearer taking the place of the farther of
//! the same name; each a string, or `{ one_of = [...] }` drawn per run as arguments are.
//!
//! A call's headers travel in its request as the workload writes it, after the body:
//! `POST /orders {"item":"widget"} headers {"Authorization":"Bearer t1"}`, which is what a
//! timeline shows and what the request is made of.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Headers as a scenario writes them: names to strings or `{ one_of = [...] }`.
pub(super) type HeadersFile = BTreeMap<String, Value>;

/// The headers the harness writes itself on every HTTP request: neither a key nor a header
/// a scenario gives may go in one.
pub(super) const HEADERS_OF_THE_HARNESS: [&str; 5] = [
    "host",
    "connection",
    "content-length",
    "content-type",
    "transfer-encoding",
];

/// What separates a call's body from its headers in the request the workload writes.
const HEADERS_MARK: &str = " headers ";

/// Checks the headers `field` gives: names that are HTTP field names the harness does not
/// write itself and that are not the key's (`key_header`), values of visible ASCII (spaces
/// and tabs inside), each a string or a non-empty `one_of` of strings.
pub(super) fn check(
    field: &str,
    headers: &HeadersFile,
    key_header: Option<&str>,
) -> Result<(), String> {
    for (name, value) in headers {
        check_name(field, name, key_header)?;
        let values = match value {
            Value::Object(object) => match (object.len(), object.get("one_of")) {
                (1, Some(Value::Array(values))) if !values.is_empty() => values.clone(),
                _ => return Err(not_a_value(field, name)),
            },
            value => vec![value.clone()],
        };
        for value in values {
            let Value::String(text) = value else {
                return Err(not_a_value(field, name));
            };
            let visible = |c: char| c == ' ' || c == '\t' || c.is_ascii_graphic();
            if !text.chars().all(visible) {
                return Err(format!(
                    "{field}.{name} = {text:?}: a header value holds visible ASCII \
                     characters, spaces and tabs only"
                ));
            }
        }
    }
    Ok(())
}

fn not_a_value(field: &str, name: &str) -> String {
    format!("{field}.{name} must be a string, or {{ one_of = [\"...\", ...] }} of strings")
}

fn check_name(field: &str, name: &str, key_header: Option<&str>) -> Result<(), String> {
    let token_char = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token_char) {
        return Err(format!(
            "{field}: {name:?} is no HTTP header name (letters, digits and \
             !#$%&'*+-.^_`|~ only)"
        ));
    }
    if HEADERS_OF_THE_HARNESS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "{field}: the harness writes {name} itself (from the call's body and the \
             connection)"
        ));
    }
    if key_header.is_some_and(|key| key.eq_ignore_ascii_case(name)) {
        return Err(format!(
            "{field}: {name} is the header the client's key goes in (key = {{ header = ... \
             }}), which the harness writes per request"
        ));
    }
    Ok(())
}

/// The headers of one call: `layers` from the farthest (`[server]`) to the nearest (the
/// call), a nearer header taking the place of a farther one of the same name, whatever its
/// case.
pub(super) fn merged(layers: &[Option<&HeadersFile>]) -> Value {
    let mut by_name: BTreeMap<String, (String, Value)> = BTreeMap::new();
    for headers in layers.iter().flatten() {
        for (name, value) in *headers {
            by_name.insert(name.to_ascii_lowercase(), (name.clone(), value.clone()));
        }
    }
    Value::Object(by_name.into_values().collect())
}

/// The request a workload writes for a call: `call` (`METHOD /path BODY`) with its drawn
/// `headers` after it, when it has any.
pub(super) fn with_headers(call: String, headers: &Value) -> String {
    match headers.as_object() {
        Some(headers) if !headers.is_empty() => {
            format!("{call}{HEADERS_MARK}{}", Value::Object(headers.clone()))
        }
        _ => call,
    }
}

/// The body and the headers of a request's rest (`BODY` or `BODY headers {...}`) as
/// [`with_headers`] wrote it.
pub(super) fn body_and_headers(rest: &str) -> (Value, Map<String, Value>) {
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    let body = values
        .next()
        .and_then(Result::ok)
        .expect("a body the harness wrote");
    let after = &rest[values.byte_offset()..];
    let headers = after
        .strip_prefix(HEADERS_MARK)
        .map(|headers| serde_json::from_str(headers).expect("headers the harness wrote"))
        .and_then(|headers: Value| headers.as_object().cloned())
        .unwrap_or_default();
    (body, headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_calls_headers_travel_after_its_body_and_come_back_apart() {
        let headers = json!({"Authorization": "Bearer t1", "X-Tenant": "a b"});
        let call = with_headers(r#"POST /orders {"note":"a } headers {"}"#.into(), &headers);
        assert_eq!(
            call,
            r#"POST /orders {"note":"a } headers {"} headers {"Authorization":"Bearer t1","X-Tenant":"a b"}"#
        );
        let rest = call.splitn(3, ' ').nth(2).unwrap();
        let (body, read) = body_and_headers(rest);
        assert_eq!(body, json!({"note": "a } headers {"}));
        assert_eq!(Value::Object(read), headers);
        let (body, read) = body_and_headers(r#"{"amount":5}"#);
        assert_eq!((body, read.len()), (json!({"amount": 5}), 0));
        assert_eq!(with_headers("GET /x {}".into(), &json!({})), "GET /x {}");
    }

    #[test]
    fn nearer_headers_take_the_place_of_farther_ones_of_the_same_name() {
        let server: HeadersFile = [("Authorization".to_string(), json!("Bearer all"))].into();
        let call: HeadersFile = [
            ("authorization".to_string(), json!("Bearer one")),
            ("X-Api-Version".to_string(), json!({"one_of": ["1", "2"]})),
        ]
        .into();
        assert_eq!(
            merged(&[Some(&server), None, Some(&call)]),
            json!({"authorization": "Bearer one", "X-Api-Version": {"one_of": ["1", "2"]}})
        );
    }

    #[test]
    fn headers_a_request_cannot_carry_are_refused() {
        let one = |name: &str, value: Value| -> HeadersFile { [(name.to_string(), value)].into() };
        let key = Some("Idempotency-Key");
        assert!(check("server.headers", &one("X-Tenant", json!("a")), key).is_ok());
        let said = |headers: HeadersFile| check("server.headers", &headers, key).unwrap_err();
        assert!(said(one("Bad Name", json!("a"))).contains("no HTTP header name"));
        assert!(said(one("Content-Length", json!("1"))).contains("writes Content-Length itself"));
        assert!(said(one("idempotency-key", json!("k"))).contains("the client's key goes in"));
        assert!(said(one("X-A", json!("a\r\nX-B: b"))).contains("visible ASCII"));
        assert!(said(one("X-A", json!(5))).contains("must be a string"));
        assert!(said(one("X-A", json!({"one_of": []}))).contains("must be a string"));
        assert!(said(one("X-A", json!({"one_of": ["a", 1]}))).contains("must be a string"));
    }
}
