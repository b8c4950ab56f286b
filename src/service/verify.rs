//! A scenario verified against its server before a check ([`Scenario::verify`]): the server
//! starts on a scratch database, offers every tool the scenario calls, and takes the
//! arguments the clients send by each tool's `inputSchema`.

use super::{KeyPlacement, Scenario, ScenarioError, ServerTransport};
use crate::process::ScratchDir;
use serde_json::Value;

impl Scenario {
    /// Starts the server once on a scratch database and checks that it offers every tool the
    /// scenario calls, and the `idempotency` capability when the key goes in the
    /// `idempotencyKey` parameter. The error is one line.
    pub fn verify(&self) -> Result<(), ScenarioError> {
        let name = self.path.display();
        let scratch = ScratchDir::create(super::system::scratch_root().join(format!(
            "retrysim-scenario-{}-{}",
            std::process::id(),
            super::system::unique_suffix()
        )))
        .map_err(|error| ScenarioError(format!("a scratch directory: {error}")))?;
        let directory = scratch.path();
        let in_scenario = |why: String| ScenarioError(format!("scenario {name}: {why}"));
        let system = super::OnService(self.target.clone());
        let mut database = system
            .new_database(directory, &directory.join("verify.sock"))
            .map_err(in_scenario)?;
        let command = system.command(database.as_ref(), None);
        let mut server = self
            .target
            .server_on(command, &directory.join("verify.sock"))
            .map_err(|error| in_scenario(error.to_string()))?;
        let offered = server.start();
        server.kill();
        drop(server);
        let offer = offered.map_err(|error| in_scenario(error.to_string()))?;
        // The effect tables are there once the server has started (it made its schema).
        if self.target.database_env.is_some() {
            database.server_gone().map_err(in_scenario)?;
            database
                .install(&self.target.effect_tables)
                .map_err(in_scenario)?;
        }
        drop(database);
        drop(scratch);
        // A plain HTTP server offers no tools: that it starts and listens is all there is.
        if let ServerTransport::Http { .. } = self.target.transport {
            return Ok(());
        }
        for tool in self.tools() {
            if !offer.tools.iter().any(|offered| offered.name == tool) {
                let names: Vec<&str> = offer.tools.iter().map(|t| t.name.as_str()).collect();
                return Err(ScenarioError(format!(
                    "scenario {name}: the server offers no tool `{tool}` (it offers: {})",
                    names.join(", ")
                )));
            }
        }
        self.check_arguments(&offer.tools)
            .map_err(|why| ScenarioError(format!("scenario {name}: {why}")))?;
        let declares_idempotency = offer.capabilities.to_string().contains("\"idempotency\"");
        if self.target.key == KeyPlacement::IdempotencyKey && !declares_idempotency {
            return Err(ScenarioError(format!(
                "scenario {name}: key = \"idempotencyKey\", but the server declares no \
                 `idempotency` capability"
            )));
        }
        Ok(())
    }
}

impl Scenario {
    /// Checks every call's arguments, as the client sends them (its key in its argument when
    /// it goes there, each `one_of` value in turn), against the tool's `inputSchema`: the
    /// arguments it requires are there, and those it types have values of that type.
    fn check_arguments(&self, tools: &[super::Tool]) -> Result<(), String> {
        let key_argument = match &self.target.key {
            KeyPlacement::Argument(name) => Some(name.as_str()),
            _ => None,
        };
        for (client, calls) in self.target.clients.iter().enumerate() {
            for (index, call) in calls.iter().enumerate() {
                let Some(tool) = tools.iter().find(|tool| tool.name == call.tool) else {
                    continue;
                };
                let at = format!("client {} call {} (`{}`)", client + 1, index + 1, call.tool);
                schema_problem(&tool.input_schema, &call.arguments, key_argument)
                    .map_or(Ok(()), |why| Err(format!("{at}: {why}")))?;
            }
        }
        Ok(())
    }
}

/// What is wrong with `arguments` (plus a string in `key_argument`) by `schema`, a tool's
/// `inputSchema`: a required argument missing, or one whose value is not of its type.
fn schema_problem(schema: &Value, arguments: &Value, key_argument: Option<&str>) -> Option<String> {
    let sent = |name: &str| key_argument == Some(name) || arguments.get(name).is_some();
    let required = schema.get("required").and_then(Value::as_array);
    let missing = required
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|name| !sent(name));
    if let Some(name) = missing {
        return Some(format!(
            "the tool's inputSchema requires the argument `{name}`, which the call does not send"
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object)?;
    for (name, property) in properties {
        let Some(types) = property.get("type") else {
            continue;
        };
        let values: Vec<&Value> = match (key_argument == Some(name.as_str()), arguments.get(name)) {
            (true, _) => key_values(),
            (false, Some(value)) => alternatives(value),
            (false, None) => continue,
        };
        for value in values {
            // A value taken from an earlier answer is typed when the run takes it.
            let taken = value.as_str().is_some_and(|text| {
                matches!(super::answers::references(text).as_slice(), [one] if one.is_whole(text))
            });
            if !taken && !of_type(value, types) {
                return Some(format!(
                    "the tool's inputSchema types the argument `{name}` as {types}, but the call \
                     sends {value}"
                ));
            }
        }
    }
    None
}

/// The key, as the client sends it: a string.
fn key_values() -> Vec<&'static Value> {
    static KEY: Value = Value::String(String::new());
    vec![&KEY]
}

/// The values an argument may take: each of a `{ one_of = [...] }`, else itself.
fn alternatives(value: &Value) -> Vec<&Value> {
    match value.as_object() {
        Some(object) if object.len() == 1 => match object.get("one_of") {
            Some(Value::Array(values)) => values.iter().collect(),
            _ => vec![value],
        },
        _ => vec![value],
    }
}

/// Whether `value` is of the JSON Schema type (or one of the types) `types` names; a type
/// the check does not know passes.
fn of_type(value: &Value, types: &Value) -> bool {
    let is = |name: &str| match name {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    };
    match types {
        Value::String(name) => is(name),
        Value::Array(names) => names.iter().filter_map(Value::as_str).any(is),
        _ => true,
    }
}
