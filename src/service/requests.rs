//! The requests a service is sent, as the harness writes them: a call with its references
//! to earlier answers resolved, an HTTP request's form, a status lookup's, and a workload's
//! drawn values.

use super::answers::{self, Unresolved};
use super::Answer;
use crate::{ChoiceKind, Decider, Keyed};
use serde_json::{json, Value};

/// A call the workload wrote (`METHOD /path BODY headers {...}` over HTTP, `tool ARGUMENTS`
/// over MCP) with its references to earlier answers resolved.
pub(super) fn built_call(
    call: &str,
    http: bool,
    earlier: &[Option<&Answer>],
) -> Result<String, Unresolved> {
    if !http {
        let (tool, arguments) = call.split_once(' ').expect("a call the harness wrote");
        let arguments = serde_json::from_str(arguments).expect("arguments the harness wrote");
        return Ok(format!(
            "{tool} {}",
            answers::resolved(&arguments, earlier)?
        ));
    }
    let mut parts = call.splitn(3, ' ');
    let (Some(method), Some(path), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        unreachable!("a call the harness wrote: {call}")
    };
    let path = answers::resolved_text(path, earlier, answers::path_escaped)?;
    let (body, headers) = super::headers::body_and_headers(rest);
    let body = answers::resolved(&body, earlier)?;
    let headers = answers::resolved(&Value::Object(headers), earlier)?;
    let visible = |c: char| c == ' ' || c == '\t' || c.is_ascii_graphic();
    for (name, value) in headers.as_object().into_iter().flatten() {
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        if !text.chars().all(visible) {
            return Err(Unresolved::Unusable(format!(
                "the header {name} takes {text:?} from an earlier answer, which an HTTP header \
                 cannot carry (visible ASCII, spaces and tabs only)"
            )));
        }
    }
    let headers = Value::Object(
        (headers.as_object().into_iter().flatten())
            .map(|(name, value)| {
                let text = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_string);
                (name.clone(), Value::String(text))
            })
            .collect(),
    );
    Ok(super::headers::with_headers(
        format!("{method} {path} {body}"),
        &headers,
    ))
}

/// The transport's form of an HTTP request: a `GET`, `HEAD` or `DELETE` with an empty body
/// sends none.
pub(super) fn http_request(method: &str, path: &str, headers: Value, body: Value) -> Value {
    let no_body = matches!(method, "GET" | "HEAD" | "DELETE") && body == json!({});
    let body = if no_body { Value::Null } else { body };
    json!({"method": method, "path": path, "headers": headers, "body": body})
}

/// The HTTP request of a status lookup of `request`: `lookup` (`METHOD /path`) with the
/// request id in place of `{key}`, and the headers the client sends `request` with (its
/// bearer, its tenant), but no key header and no body.
pub(super) fn http_lookup_params(lookup: &str, request: &Keyed<String>) -> Value {
    let (method, path) = lookup.split_once(' ').expect("a lookup the scenario wrote");
    let path = path.replace(
        super::scenario::STATUS_KEY_MARK,
        &answers::path_escaped(&request.id),
    );
    let rest = request
        .args
        .splitn(3, ' ')
        .nth(2)
        .expect("a call the harness wrote");
    let (_, headers) = super::headers::body_and_headers(rest);
    json!({"method": method, "path": path, "headers": headers, "body": null})
}

/// A tool error's text (its first content item's), or the whole result.
pub(super) fn tool_error(result: &Value) -> String {
    result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .map_or_else(|| result.to_string(), str::to_string)
}

/// `template` with each `{"one_of": [...]}` in it replaced by one of its values, drawn by
/// `decider`.
pub(super) fn drawn(template: &Value, decider: &mut Decider<'_>) -> Value {
    match template {
        Value::Object(object) => {
            if let (1, Some(Value::Array(values))) = (object.len(), object.get("one_of")) {
                if !values.is_empty() {
                    let options = u32::try_from(values.len()).unwrap_or(u32::MAX);
                    decider.tell(options, || {
                        values
                            .iter()
                            .map(|value| format!("the call takes {value}"))
                            .collect()
                    });
                    let chosen = decider.choose(ChoiceKind::Workload, options);
                    return drawn(&values[chosen as usize], decider);
                }
            }
            Value::Object(
                object
                    .iter()
                    .map(|(name, value)| (name.clone(), drawn(value, decider)))
                    .collect(),
            )
        }
        Value::Array(values) => Value::Array(values.iter().map(|v| drawn(v, decider)).collect()),
        other => other.clone(),
    }
}
