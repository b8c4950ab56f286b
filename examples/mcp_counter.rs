//! A real MCP server checked as it is: `examples/mcp/counter_server.py`, a counter tool
//! written in Python with the standard library only, run over stdio. Without an idempotency
//! key a lost answer's retry adds again; with `KEYED=1` the server records each request id in
//! the same transaction as the addition, and a retry is answered from the record.
//!
//! `cargo run --example mcp_counter` checks both; `cargo test` runs the test below.

use retrysim::service::{
    Call, DatabaseKind, FreshValues, KeyPlacement, OnService, ServerClock, ServerCommand,
    ServerTransport, ServiceTarget,
};
use retrysim::{exhaust, Bounds, CheckOptions, CheckReport, Simulator};
use serde_json::json;

/// The counter server, keyed or not: one client adds 5 under a request id.
fn counter(keyed: bool) -> ServiceTarget {
    ServiceTarget {
        pending: None,
        transport: ServerTransport::Stdio,
        server: ServerCommand {
            program: "python3".into(),
            args: vec![concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/mcp/counter_server.py"
            )
            .into()],
            env: vec![("KEYED".into(), if keyed { "1" } else { "0" }.into())],
            working_dir: None,
            answer_wait_ms: 10_000,
        },
        database_env: Some("RETRYSIM_DB".into()),
        database: DatabaseKind::Sqlite,
        database_points: None,
        database_url_scheme: None,
        effect_tables: vec!["counter".into()],
        provider_env: None,
        key: KeyPlacement::Argument("request_id".into()),
        value_pointers: vec!["/structuredContent/total".into()],
        clients: vec![vec![Call {
            key_of: None,
            tool: "add".into(),
            arguments: json!({"amount": 5}),
            // Headers are plain HTTP's: an MCP call has none of its own.
            headers: json!({}),
            // It adds: an operation, owed one effect.
            read: false,
        }]],
        status: None,
        conformance: None,
        reuse: true,
        // Each restart starts Python afresh (a spare would need the helper's gate).
        spare: false,
        // Learned before a check by the command line; this server stores nothing fresh.
        fresh: FreshValues::default(),
        concurrent: false,
        // It reads no clock: all the time it sees is the harness's.
        clock: ServerClock::Harness,
    }
}

/// Every run within one client, one call, two attempts and one fault.
fn check(keyed: bool) -> CheckReport {
    let bounds = Bounds {
        clients_max: 1,
        intents_max: 1,
        attempts_max: 2,
        faults_max: 1,
        ..Bounds::default()
    };
    exhaust(
        &mut Simulator::new(OnService(counter(keyed))),
        &CheckOptions::new(bounds),
    )
}

fn main() {
    for keyed in [false, true] {
        let report = check(keyed);
        let broken: Vec<String> = report
            .violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect();
        println!("keyed={keyed}: {} runs, broken: {broken:?}", report.runs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrysim::Invariant;

    /// Without a key the server is caught at one fault, by the harness's triggers on its own
    /// file; with one it is clean over the same bound.
    #[test]
    fn the_keyless_server_is_caught_and_the_keyed_one_is_clean() {
        let keyless = check(false);
        assert!(
            keyless.violation(Invariant::AtMostOnceEffect).is_some(),
            "{keyless:?}"
        );
        let keyed = check(true);
        assert!(keyed.violations.is_empty(), "{:?}", keyed.violations);
        assert!(keyed.runs() > 100, "{} runs", keyed.runs());
    }
}
