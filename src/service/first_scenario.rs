//! A first scenario for an HTTP service, written from a few answers (`retrysim init`): its
//! start command, its database and effect tables, and the endpoint to call, given or read
//! from the service's own OpenAPI document (FastAPI serves one at `/openapi.json`), where a
//! POST that takes an `Idempotency-Key` header becomes a call and a second call under its key
//! with another body.

use super::system::ServiceAlone;
use super::{
    Call, DatabaseKind, FreshValues, KeyPlacement, ServerClock, ServerCommand, ServerTransport,
    ServiceTarget,
};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::path::Path;

/// What `retrysim init` is told of a service.
#[derive(Clone, Debug)]
pub struct ServiceAnswers {
    /// The command that starts it, run in the scenario's directory.
    pub command: Vec<String>,
    /// Variables to give it besides the harness's.
    pub env: Vec<(String, String)>,
    /// Its database: a SQLite file, or a PostgreSQL database the harness runs.
    pub database: DatabaseKind,
    /// The tables whose rows are its effects.
    pub effect_tables: Vec<String>,
    /// The endpoint to call, `METHOD /path`; `None` to read it from the OpenAPI document.
    pub endpoint: Option<String>,
    /// The body to send; `None` for one built from the OpenAPI document's schema (or `{}`).
    pub body: Option<Value>,
    /// Where the service serves its OpenAPI document (`/openapi.json`); `None` for none.
    pub openapi: Option<String>,
    /// Whether it serves requests at once (threads, async), so that two may be in flight.
    pub concurrent: bool,
}

/// The variable that gives a SQLite service its file's path in a written scenario.
pub const SQLITE_ENV_WRITTEN: &str = "RETRYSIM_DB";

/// The call a first scenario makes, and where it came from.
struct Endpoint {
    method: String,
    path: String,
    body: Value,
    /// What the OpenAPI document said, for the file's comments.
    found: Vec<String>,
}

/// The scenario file for `answers`, its server run in `directory`: TOML with comments, or why
/// it cannot be written (one line).
pub fn first_scenario(answers: &ServiceAnswers, directory: &Path) -> Result<String, String> {
    if answers.command.is_empty() {
        return Err("name the command that starts the service (after --)".into());
    }
    if answers.effect_tables.is_empty() {
        return Err(
            "name the tables whose rows are the service's effects (--effect-tables)".into(),
        );
    }
    let endpoint = match (&answers.endpoint, &answers.openapi) {
        (Some(endpoint), _) => given_endpoint(endpoint, answers.body.clone())?,
        (None, Some(path)) => {
            let document = openapi_of(answers, directory, path)?;
            endpoint_in(&document, path, answers.body.clone())?
        }
        (None, None) => {
            return Err(
                "name the endpoint (--endpoint \"POST /orders\") or where the service \
                        serves its OpenAPI document (--openapi /openapi.json)"
                    .into(),
            )
        }
    };
    let value = learned_value(answers, directory, &endpoint)?;
    Ok(written(answers, &endpoint, &value))
}

/// The key `init` sends its call under while it learns the answer's value.
const LEARNING_KEY: &str = "retrysim-init-1";

/// What `value` points at in a written scenario, learned from the call's answers on two fresh
/// databases: the body's fields they answered alike.
#[derive(Debug, PartialEq, Eq)]
struct LearnedValue {
    /// The JSON pointers `value` lists.
    pointers: Vec<String>,
    /// What the comment beside it says: the fields left out, or why the whole body is kept.
    why: String,
}

/// The call sent once to each of two servers on fresh databases, and their answers compared
/// ([`stable_value`]).
fn learned_value(
    answers: &ServiceAnswers,
    directory: &Path,
    endpoint: &Endpoint,
) -> Result<LearnedValue, String> {
    let target = target_of(answers, directory);
    let first = answer_alone(&target, endpoint)?;
    let second = answer_alone(&target, endpoint)?;
    Ok(stable_value(&first, &second))
}

/// The answer of `endpoint`'s call under [`LEARNING_KEY`], from a server of its own.
fn answer_alone(target: &ServiceTarget, endpoint: &Endpoint) -> Result<Value, String> {
    let mut alone = ServiceAlone::start(target)?;
    let mut go_on = |_: &super::Ask| Ok(0);
    let params = json!({
        "method": endpoint.method,
        "path": endpoint.path,
        "headers": {"Idempotency-Key": LEARNING_KEY},
        "body": endpoint.body,
    });
    (alone.server.call(&params, &mut go_on)).map_err(|why| {
        format!(
            "{} {} (to learn what its answer holds): {why:?}",
            endpoint.method, endpoint.path
        )
    })
}

/// The pointers to the fields of two answers' bodies that are equal: a field that differs
/// between two runs of one call on fresh databases (a `uuid4()` id, a `created_at`) would make
/// every state of the check new. The whole body when nothing differs, or when what differs is
/// not an object's fields.
fn stable_value(first: &Value, second: &Value) -> LearnedValue {
    let whole = |why: String| LearnedValue {
        pointers: vec!["/body".into()],
        why,
    };
    let success =
        |answer: &Value| (answer["status"].as_u64()).is_some_and(|s| (200..300).contains(&s));
    if !success(first) {
        return whole(format!(
            "the call answered {} when init sent it: point at the fields of a success",
            first["status"]
        ));
    }
    if first["body"] == second["body"] {
        return whole("two runs of the call answered alike".into());
    }
    let (Value::Object(one), Value::Object(other)) = (&first["body"], &second["body"]) else {
        return whole(
            "it differs between two runs of the call: point at the parts that do not".into(),
        );
    };
    let pointer = |name: &str| format!("/body/{}", name.replace('~', "~0").replace('/', "~1"));
    let (same, differ): (Vec<&String>, Vec<&String>) =
        (one.keys()).partition(|name| other.get(*name) == one.get(*name));
    if same.is_empty() {
        return whole(
            "every field differs between two runs of the call: point at the parts that do not"
                .into(),
        );
    }
    LearnedValue {
        pointers: same.iter().map(|name| pointer(name)).collect(),
        why: format!(
            "the fields two runs of the call answered alike; {} differed (fresh ids, \
             timestamps) and would make every state new",
            differ
                .iter()
                .map(|name| pointer(name))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn given_endpoint(endpoint: &str, body: Option<Value>) -> Result<Endpoint, String> {
    let (method, path) = endpoint.split_once(' ').unwrap_or(("POST", endpoint));
    if !path.starts_with('/') || !method.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "--endpoint {endpoint:?}: give a method and a path, e.g. \"POST /orders\""
        ));
    }
    Ok(Endpoint {
        method: method.to_string(),
        path: path.to_string(),
        body: body.unwrap_or_else(|| json!({})),
        found: Vec::new(),
    })
}

/// The service's OpenAPI document, asked of it at `path` on a fresh database of its own.
fn openapi_of(answers: &ServiceAnswers, directory: &Path, path: &str) -> Result<Value, String> {
    let target = target_of(answers, directory);
    let mut alone = ServiceAlone::start(&target)?;
    let mut go_on = |_: &super::Ask| Ok(0);
    let params = json!({"method": "GET", "path": path, "headers": {}, "body": null});
    let answer = alone
        .server
        .call(&params, &mut go_on)
        .map_err(|why| format!("GET {path}: {why:?}"))?;
    match answer["status"].as_u64() {
        Some(200) if answer["body"].is_object() => Ok(answer["body"].clone()),
        status => Err(format!(
            "GET {path} answered {} {}: no OpenAPI document there (FastAPI serves one at \
             /openapi.json; or give --endpoint)",
            status.map_or_else(|| "no response".into(), |s| s.to_string()),
            answer["body"]
                .to_string()
                .chars()
                .take(80)
                .collect::<String>()
        )),
    }
}

/// A target that starts the service as the written scenario will.
fn target_of(answers: &ServiceAnswers, directory: &Path) -> ServiceTarget {
    let (program, args) = answers.command.split_first().expect("a command, checked");
    let program = if program.contains('/') {
        directory.join(program).display().to_string()
    } else {
        program.clone()
    };
    ServiceTarget {
        server: ServerCommand {
            program,
            args: args.to_vec(),
            env: answers.env.clone(),
            working_dir: Some(directory.to_path_buf()),
            answer_wait_ms: super::scenario::ANSWER_WAIT_MS_DEFAULT,
        },
        transport: ServerTransport::Http {
            port_env: "PORT".into(),
            ready: None,
        },
        database_env: Some(match answers.database {
            DatabaseKind::Sqlite => SQLITE_ENV_WRITTEN.into(),
            DatabaseKind::Postgres => "DATABASE_URL".into(),
        }),
        database: answers.database,
        database_points: match answers.database {
            DatabaseKind::Sqlite => None,
            DatabaseKind::Postgres => Some(crate::postgres::RelayPoints::Transactions),
        },
        database_url_scheme: None,
        effect_tables: answers.effect_tables.clone(),
        provider_env: None,
        key: KeyPlacement::Header("Idempotency-Key".into()),
        value_pointers: vec!["/body".into()],
        pending: None,
        clients: vec![vec![Call {
            tool: "GET /".into(),
            arguments: json!({}),
            key_of: None,
            headers: json!({}),
            read: true,
        }]],
        status: None,
        concurrent: false,
        clock: ServerClock::Own,
        reuse: true,
        spare: false,
        fresh: FreshValues::default(),
        conformance: None,
    }
}

/// Whether `command` runs a Python script itself (`python3 app.py`, or `sh -c 'exec python3
/// app.py'`), which a spare holds at retrysim's start-up gate with its imports done.
fn runs_a_python_script(command: &[String]) -> bool {
    let name_of = |program: &str| {
        let name = Path::new(program)
            .file_name()
            .and_then(|name| name.to_str());
        name.unwrap_or_default().to_string()
    };
    match command {
        [shell, flag, line]
            if ["sh", "bash"].contains(&name_of(shell).as_str()) && flag == "-c" =>
        {
            let words: Vec<&str> = line.split_whitespace().collect();
            matches!(words[..], ["exec", python, script, ..]
                if python.contains("python") && script.ends_with(".py"))
        }
        [program, script, ..] => name_of(program).starts_with("python") && script.ends_with(".py"),
        _ => false,
    }
}

/// The first POST of `document` that takes an `Idempotency-Key` header (else its first
/// POST), with a body from its schema unless one is given.
fn endpoint_in(document: &Value, served_at: &str, body: Option<Value>) -> Result<Endpoint, String> {
    let paths = document["paths"].as_object().ok_or_else(|| {
        format!("the document at {served_at} has no paths: is it an OpenAPI document?")
    })?;
    let posts: Vec<(&String, &Value)> = (paths.iter())
        .filter_map(|(path, item)| item.get("post").map(|post| (path, post)))
        .collect();
    let keyed = |post: &Value| {
        (post["parameters"].as_array().into_iter().flatten()).any(|parameter| {
            parameter["in"] == "header"
                && (parameter["name"].as_str())
                    .is_some_and(|name| name.eq_ignore_ascii_case("idempotency-key"))
        })
    };
    let chosen = (posts.iter().find(|(_, post)| keyed(post)))
        .or_else(|| posts.first())
        .ok_or_else(|| format!("the document at {served_at} has no POST operation to call"))?;
    let (path, post) = *chosen;
    let mut found = vec![format!(
        "POST {path}{} (from {served_at})",
        if keyed(post) {
            ", which takes an Idempotency-Key header"
        } else {
            ": it names no Idempotency-Key header"
        }
    )];
    for (other, _) in posts.iter().filter(|(other, _)| *other != path) {
        found.push(format!("also POST {other}: add a [[client]] call for it"));
    }
    let body = body.unwrap_or_else(|| {
        let schema = &post["requestBody"]["content"]["application/json"]["schema"];
        example_of(document, schema, 0)
    });
    Ok(Endpoint {
        method: "POST".into(),
        path: path.clone(),
        body,
        found,
    })
}

/// A value that fits `schema` (its `example` where it gives one), following `$ref`s into
/// `document` up to a depth.
fn example_of(document: &Value, schema: &Value, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(reference) = schema["$ref"].as_str() {
        let pointer = reference.trim_start_matches('#');
        return document.pointer(pointer).map_or(Value::Null, |schema| {
            example_of(document, schema, depth + 1)
        });
    }
    if let Some(example) = schema.get("example") {
        return example.clone();
    }
    if let Some(first) = (schema["anyOf"].as_array()).and_then(|options| options.first()) {
        return example_of(document, first, depth + 1);
    }
    match schema["type"].as_str() {
        Some("object") | None if schema.get("properties").is_some() => {
            let properties = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            Value::Object(
                (properties.iter())
                    .map(|(name, property)| {
                        let value = match example_of(document, property, depth + 1) {
                            Value::String(_) if property.get("example").is_none() => {
                                Value::String(name.clone())
                            }
                            value => value,
                        };
                        (name.clone(), value)
                    })
                    .collect::<Map<_, _>>(),
            )
        }
        Some("object") | None => json!({}),
        Some("string") => json!("text"),
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("boolean") => json!(true),
        Some("array") => json!([example_of(document, &schema["items"], depth + 1)]),
        Some(_) => Value::Null,
    }
}

/// `body` with its first value changed (the key reused with another request).
fn another(body: &Value) -> Value {
    match body {
        Value::Object(object) => {
            let mut other = object.clone();
            if let Some((name, value)) = object.iter().next() {
                let changed = match value {
                    Value::Number(n) => json!(n.as_i64().map_or(2, |n| n + 1)),
                    Value::String(text) => json!(format!("{text}-other")),
                    Value::Bool(flag) => json!(!flag),
                    other => other.clone(),
                };
                other.insert(name.clone(), changed);
            } else {
                other.insert("other".into(), json!(true));
            }
            Value::Object(other)
        }
        other => other.clone(),
    }
}

/// A TOML value of `value` (an inline table for an object).
fn toml_of(value: &Value) -> String {
    match value {
        Value::Object(object) => {
            let fields: Vec<String> = (object.iter())
                .map(|(name, value)| format!("{} = {}", toml_key(name), toml_of(value)))
                .collect();
            if fields.is_empty() {
                "{}".into()
            } else {
                format!("{{ {} }}", fields.join(", "))
            }
        }
        Value::Array(values) => {
            format!(
                "[{}]",
                values.iter().map(toml_of).collect::<Vec<_>>().join(", ")
            )
        }
        Value::Null => "\"\"".into(),
        other => other.to_string(),
    }
}

fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        name.to_string()
    } else {
        Value::String(name.to_string()).to_string()
    }
}

fn toml_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values
        .iter()
        .map(|v| Value::String(v.clone()).to_string())
        .collect();
    format!("[{}]", quoted.join(", "))
}

/// The widest comment line a written scenario holds, after its `# `.
const COMMENT_COLUMNS: usize = 88;

/// The scenario's text, its answers' value at `value`.
fn written(answers: &ServiceAnswers, endpoint: &Endpoint, value: &LearnedValue) -> String {
    let mut text = String::from(
        "# A first scenario, written by `retrysim init`: one client makes the call below, then\n\
         # sends its key again with another body (a conforming service answers 422). Edit it:\n\
         # the body, more calls, headers (an Authorization bearer), crash points (the helper:\n\
         # `retrysim helper python`), and bounds. The guide: docs/http.md.\n",
    );
    for line in &endpoint.found {
        let _ = writeln!(text, "# {line}");
    }
    let pointers = match value.pointers.as_slice() {
        [one] => Value::String(one.clone()).to_string(),
        several => toml_strings(several),
    };
    text.push('\n');
    let said = format!(
        "The answer's value, which the check compares: {}.",
        value.why
    );
    for line in crate::text::wrap_words(&said, COMMENT_COLUMNS) {
        let _ = writeln!(text, "# {line}");
    }
    let _ = writeln!(text, "value = {pointers}");
    text.push_str(
        "\n[server]\ntransport = \"http\"                   # listens on 127.0.0.1 \
         at the port in $PORT\n",
    );
    let _ = writeln!(text, "command = {}", toml_strings(&answers.command));
    if !answers.env.is_empty() {
        let env: Vec<String> = (answers.env.iter())
            .map(|(name, value)| format!("{} = {}", toml_key(name), Value::String(value.clone())))
            .collect();
        let _ = writeln!(text, "env = {{ {} }}", env.join(", "));
    }
    text.push_str(
        "clock = \"own\"                       # \"harness\" once it reads time only through the \
         helper\n",
    );
    text.push_str(if answers.concurrent {
        "concurrent = true                    # it serves requests at once: two in flight\n"
    } else {
        "# concurrent = true                  # when it serves requests at once (threads, async)\n"
    });
    if runs_a_python_script(&answers.command) {
        text.push_str(
            "spare = true                         # restarts fork from a process with its \
             imports done\n",
        );
    }
    text.push_str("\n[database]\n");
    match answers.database {
        DatabaseKind::Sqlite => {
            let _ = writeln!(text, "env = \"{SQLITE_ENV_WRITTEN}\"                   # the variable that gives it its SQLite file");
        }
        DatabaseKind::Postgres => text.push_str(
            "kind = \"postgres\"                    # a throwaway cluster; it gets DATABASE_URL\n",
        ),
    }
    let _ = writeln!(
        text,
        "effect_tables = {}",
        toml_strings(&answers.effect_tables)
    );
    let call = format!(
        "{{ method = \"{}\", path = {}, body = {} }}",
        endpoint.method,
        Value::String(endpoint.path.clone()),
        toml_of(&endpoint.body)
    );
    let again = format!(
        "{{ method = \"{}\", path = {}, body = {}, key_of = 1 }}",
        endpoint.method,
        Value::String(endpoint.path.clone()),
        toml_of(&another(&endpoint.body))
    );
    let _ = write!(
        text,
        "\n[[client]]\ncalls = [\n  {call},\n  {again},  # call 1's key, another body\n]\n\n\
         [bounds]\nattempts_max = 2\nfaults_max = 1\n"
    );
    if answers.concurrent {
        text.push_str(
            "preemptions_max = 1                  # races that one switch between requests \
             finds\n                                     # (check-then-insert); remove it to \
             try every switch\n",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fastapi_document() -> Value {
        json!({
            "openapi": "3.1.0",
            "paths": {
                "/health": {"get": {}},
                "/orders": {"post": {
                    "parameters": [{"name": "idempotency-key", "in": "header", "required": false}],
                    "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/OrderIn"}}}}
                }}
            },
            "components": {"schemas": {"OrderIn": {
                "type": "object",
                "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}}
            }}}
        })
    }

    #[test]
    fn a_keyed_post_of_an_openapi_document_is_the_call_with_a_body_from_its_schema() {
        let endpoint = endpoint_in(&fastapi_document(), "/openapi.json", None).unwrap();
        assert_eq!(
            (endpoint.method.as_str(), endpoint.path.as_str()),
            ("POST", "/orders")
        );
        assert_eq!(endpoint.body, json!({"item": "item", "quantity": 1}));
        assert!(endpoint.found[0].contains("takes an Idempotency-Key header"));
        assert_eq!(
            another(&endpoint.body),
            json!({"item": "item-other", "quantity": 1})
        );
        let answers = ServiceAnswers {
            command: vec!["python3".into(), "app.py".into()],
            env: vec![("VARIANT".into(), "claim".into())],
            database: DatabaseKind::Postgres,
            effect_tables: vec!["orders".into()],
            endpoint: None,
            body: None,
            openapi: Some("/openapi.json".into()),
            concurrent: true,
        };
        let value = stable_value(
            &json!({"status": 201, "body": {"id": "3f1c", "item": "item", "quantity": 1}}),
            &json!({"status": 201, "body": {"id": "9b2e", "item": "item", "quantity": 1}}),
        );
        assert_eq!(value.pointers, ["/body/item", "/body/quantity"]);
        assert!(value.why.contains("/body/id differed"), "{}", value.why);
        let text = written(&answers, &endpoint, &value);
        assert!(
            text.contains(r#"value = ["/body/item", "/body/quantity"]"#),
            "{text}"
        );
        assert!(text.contains("\npreemptions_max = 1"), "{text}");
        assert!(
            text.contains(r#"command = ["python3", "app.py"]"#),
            "{text}"
        );
        assert!(text.contains(r#"env = { VARIANT = "claim" }"#), "{text}");
        assert!(
            text.contains(
                r#"{ method = "POST", path = "/orders", body = { item = "item", quantity = 1 } }"#
            ),
            "{text}"
        );
        assert!(text.contains("key_of = 1 }"), "{text}");
        assert!(text.contains("\nconcurrent = true"), "{text}");
        assert!(text.contains("\nspare = true"), "{text}");
        assert!(runs_a_python_script(&[
            "/usr/bin/python3.11".into(),
            "a.py".into()
        ]));
        assert!(!runs_a_python_script(&["node".into(), "a.js".into()]));
        assert!(!runs_a_python_script(&[
            "python3".into(),
            "-m".into(),
            "app".into()
        ]));
        let shell = |line: &str| vec!["sh".to_string(), "-c".into(), line.into()];
        assert!(runs_a_python_script(&shell(
            r#"exec "${PYTHON:-python3}" orders.py"#
        )));
        assert!(!runs_a_python_script(&shell(
            "python3 migrate.py && exec python3 a.py"
        )));
        let parsed: Value = toml::from_str::<toml::Value>(&text)
            .map(|value| serde_json::to_value(value).unwrap())
            .unwrap_or_else(|error| panic!("{error}: {text}"));
        assert_eq!(parsed["database"]["kind"], "postgres");
    }

    #[test]
    fn the_value_is_the_whole_body_unless_some_of_its_fields_differ_between_two_runs() {
        let answer = |status: u64, body: Value| json!({"status": status, "body": body});
        let alike = stable_value(
            &answer(200, json!({"total": 3})),
            &answer(200, json!({"total": 3})),
        );
        assert_eq!(alike.pointers, ["/body"]);
        let refused = stable_value(&answer(400, json!("no")), &answer(400, json!("no")));
        assert_eq!(refused.pointers, ["/body"]);
        assert!(refused.why.contains("answered 400"), "{}", refused.why);
        let fresh = stable_value(
            &answer(201, json!({"id": "a", "a/b": 1})),
            &answer(201, json!({"id": "b", "a/b": 1})),
        );
        assert_eq!(fresh.pointers, ["/body/a~1b"]);
        let all_fresh = stable_value(
            &answer(201, json!({"id": "a"})),
            &answer(201, json!({"id": "b"})),
        );
        assert_eq!(all_fresh.pointers, ["/body"]);
        assert!(
            all_fresh.why.contains("every field differs"),
            "{}",
            all_fresh.why
        );
    }

    #[test]
    fn a_document_without_a_post_says_so() {
        let document = json!({"paths": {"/health": {"get": {}}}});
        let said = endpoint_in(&document, "/openapi.json", None).err().unwrap();
        assert!(said.contains("no POST operation"), "{said}");
    }
}
