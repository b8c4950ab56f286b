//! HTTP as services are called: a later call built on an earlier call's answer (an order's id
//! in its payment's path, and in a `GET` that reads the order back), a bearer header on every
//! call, a status lookup over HTTP after a reconnect, and `202 Accepted` read as *pending*
//! (`examples/http/shop.toml`).

use crate::cli::assert_bad_input;
use crate::mcp_cli::expect;
use crate::ScenarioVariant;

/// The path of the shipped `examples/http/shop.toml`.
fn shop() -> String {
    format!("{}/examples/http/shop.toml", env!("CARGO_MANIFEST_DIR"))
}

/// The shop's scenario with `from` replaced by `to`, beside its server.
fn shop_variant(name: &str, from: &str, to: &str) -> ScenarioVariant {
    ScenarioVariant::of("http/shop.toml", name, from, to)
}

/// The shop's order and payment alone (its first two calls), where a check is not about the
/// read that follows them.
const WITHOUT_THE_READ: &str = "--intents=2";

/// The payment's path takes the order's id from the answer its client got, and so does the
/// `GET` that reads the order back: clean and exhausted (crashes, lost answers and reconnects
/// included) when the payment is keyed, the read owed no effect; a payment that ignores its
/// key is caught paying twice, the id in its path as the order's answer gave it.
#[test]
fn a_payment_built_on_its_orders_answer_is_clean_and_a_keyless_one_caught() {
    let clean = expect(&["check", &shop()], 3);
    assert!(clean.contains("bound: exhausted"), "{clean}");
    assert!(clean.contains("intents_max=3"), "{clean}");
    assert!(clean.contains("at-most-once-effect      clean"), "{clean}");
    assert!(clean.contains("outcome-agreement        clean"), "{clean}");
    assert!(clean.contains("replay-fidelity          clean"), "{clean}");
    let keyless = shop_variant("pay-ignores-key", "\"correct\"", "\"pay-ignores-key\"");
    // The levels alone, in order: where a check stops after a seeded run's violation depends
    // on the wall clock (the levels below it get 10 s), and so would which tape is shown.
    let caught = expect(
        &[
            "check",
            &keyless.path(),
            WITHOUT_THE_READ,
            "--width",
            "400",
            "--seeded-runs",
            "0",
        ],
        1,
    );
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    assert!(
        caught.contains(r#"send B#2: r2: POST /orders/1/pay {"amount":500}"#),
        "the retried payment's path holds the order's id: {caught}"
    );
}

/// A call whose earlier call did not succeed is not sent: without the bearer header every
/// order is refused 401, and its payment, built on the order's id, is never sent; the check
/// says why no call succeeded.
#[test]
fn a_call_built_on_an_answer_never_received_is_not_sent() {
    let bare = shop_variant(
        "no-bearer",
        "headers = { Authorization = \"Bearer t0k3n\" }\n",
        "",
    );
    let replayed = expect(
        &["replay", &bare.path(), "--tape", "0", "--width", "400"],
        0,
    );
    assert!(
        replayed.contains(r#"refused: HTTP 401: {"error":"unauthorized"}"#),
        "{replayed}"
    );
    assert!(
        replayed.contains("B builds on an answer the client never got: not sent"),
        "{replayed}"
    );
    assert!(replayed.contains("0 attempt(s), not sent"), "{replayed}");
    // A check in which no call succeeded says what the first call concluded, and what a 401
    // asks of a scenario.
    let refused = expect(
        &["check", &bare.path(), "--faults-max", "0", "--width", "400"],
        3,
    );
    assert!(refused.contains("no call succeeded"), "{refused}");
    assert!(
        refused.contains(r#"A concluded failed (HTTP 401: {"error":"unauthorized"})"#),
        "{refused}"
    );
    assert!(
        refused.contains("a 401 or 403 asks for credentials"),
        "{refused}"
    );
    let authorized = expect(&["replay", &shop(), "--tape", "0", "--width", "400"], 0);
    assert!(
        authorized.contains(r#"headers {"Authorization":"Bearer t0k3n"}"#),
        "{authorized}"
    );
    assert!(authorized.contains("POST /orders/1/pay"), "{authorized}");
}

/// A reconnecting client asks `GET /requests/{key}` before it sends again, with its call's
/// headers: a lookup that answers what the request answered is clean (above); one that
/// answers "done" for a request it has no record of is caught.
#[test]
fn a_status_lookup_over_http_is_asked_on_reconnect_and_held_to_the_truth() {
    let optimistic = shop_variant("status-optimistic", "\"correct\"", "\"status-optimistic\"");
    let caught = expect(
        &[
            "check",
            &optimistic.path(),
            WITHOUT_THE_READ,
            "--width",
            "400",
        ],
        1,
    );
    assert!(caught.contains("will look up the status of A"), "{caught}");
    assert!(
        caught.contains("look up A#2: status of r1: POST /orders"),
        "{caught}"
    );
    assert!(caught.contains("VIOLATED outcome-agreement"), "{caught}");
}

/// A payment answered `202 Accepted` is *pending*, not an answer: the client polls under its
/// key until it hears the saved 200, and the check is clean.
#[test]
fn a_202_accepted_is_pending_until_the_client_hears_the_answer() {
    let accepted = shop_variant(
        "accepted",
        "VARIANT = \"correct\"",
        "VARIANT = \"correct\", ACCEPTED = \"1\"",
    );
    let replayed = expect(
        &["replay", &accepted.path(), "--tape", "0", "--width", "400"],
        0,
    );
    assert!(replayed.contains("handle B#1 -> pending"), "{replayed}");
    assert!(replayed.contains("handle B#2 -> replayed 1"), "{replayed}");
    let clean = expect(&["check", &accepted.path(), WITHOUT_THE_READ], 3);
    assert!(clean.contains("bound: exhausted"), "{clean}");
    assert!(clean.contains("eventual-verdict         clean"), "{clean}");
}

/// Over MCP a call's arguments take values from an earlier call's result alike: the second
/// `add` adds the total the first answered.
#[test]
fn an_mcp_calls_arguments_take_a_value_from_an_earlier_result() {
    let chained = ScenarioVariant::of(
        "mcp/counter.toml",
        "chained",
        r#"calls = [{ tool = "add", arguments = { amount = 5 } }]"#,
        r#"calls = [{ tool = "add", arguments = { amount = 5 } },
         { tool = "add", arguments = { amount = "{1:/structuredContent/total}" } }]"#,
    );
    let replayed = expect(
        &["replay", &chained.path(), "--tape", "0", "--width", "400"],
        0,
    );
    assert!(
        replayed.contains(r#"send B#1: r2: add {"amount":5}"#),
        "{replayed}"
    );
    assert!(replayed.contains("concludes B"), "{replayed}");
    assert!(replayed.contains("succeeded 10"), "{replayed}");
}

/// A `GET` in a workload is a read: it is sent without the key, answered (not applied or
/// replayed), owed no effect, and asked again after a reconnect with no status lookup. The
/// shop's read of the order is clean (above); one that writes a view count into the order's
/// row is caught by `at-most-once-effect` (at most none, for a read), in a run with no fault.
#[test]
fn a_read_is_owed_no_effect_and_one_that_writes_is_caught() {
    let replayed = expect(&["replay", &shop(), "--tape", "0", "--width", "400"], 0);
    assert!(
        replayed.contains("send C#1: r3: GET /orders/1 {}"),
        "the read's path holds the order's id: {replayed}"
    );
    assert!(replayed.contains("handle C#1 -> answered 1"), "{replayed}");
    assert!(
        replayed.contains("GET /orders/{1:/body/order_id} {} headers"),
        "{replayed}"
    );
    assert!(
        replayed.contains("(a read): 1 attempt(s), succeeded 1, 0 committed"),
        "{replayed}"
    );
    let writing = shop_variant("read-counts-views", "\"correct\"", "\"read-counts-views\"");
    let caught = expect(&["check", &writing.path(), "--width", "400"], 1);
    assert!(caught.contains("VIOLATED at-most-once-effect"), "{caught}");
    assert!(
        caught.contains("C (c1 r3: GET /orders/{1:/body/order_id}"),
        "{caught}"
    );
    assert!(
        caught.contains("is a read, but 1 effect(s) committed for it"),
        "{caught}"
    );
    assert!(caught.contains("faults_max=0"), "{caught}");
}

/// A call says what it is: `read = false` makes the shop's `GET` an operation, which commits
/// nothing while its client hears a success (caught: an operation owes one effect), and a
/// read cannot reuse a key or lend one (one line, exit 2).
#[test]
fn a_call_says_whether_it_reads() {
    let operation = shop_variant(
        "get-as-operation",
        r#"path = "/orders/{1:/body/order_id}" }"#,
        r#"path = "/orders/{1:/body/order_id}", read = false }"#,
    );
    let caught = expect(
        &[
            "check",
            &operation.path(),
            "--faults-max",
            "0",
            "--width",
            "400",
        ],
        1,
    );
    assert!(caught.contains("VIOLATED outcome-agreement"), "{caught}");
    assert!(
        caught.contains("concluded succeeded 1 but has 0 committed effects"),
        "{caught}"
    );
    let keyed_read = shop_variant(
        "read-with-key",
        r#"path = "/orders/{1:/body/order_id}" }"#,
        r#"path = "/orders/{1:/body/order_id}", key_of = 1 }"#,
    );
    assert_bad_input(
        &["check", &keyed_read.path()],
        "client 1 call 3 (`GET /orders/{1:/body/order_id}`): key_of on a read",
    );
    let lent = shop_variant(
        "key-of-a-read",
        r#"path = "/orders/{1:/body/order_id}" }"#,
        r#"path = "/orders/{1:/body/order_id}" },
  { method = "POST", path = "/orders", body = { item = "gadget", quantity = 1 }, key_of = 3 }"#,
    );
    assert_bad_input(&["check", &lent.path()], "key_of = 3 names a read");
}

/// Over MCP a call is a read when it says `read = true`: the counter's `status` tool, asked
/// for the first call's request, is answered its total with no effect owed, and its
/// `request_id` is the one it names (a read's key is not put in it).
#[test]
fn an_mcp_tool_that_looks_up_is_a_read_when_it_says_so() {
    let added = r#"calls = [{ tool = "add", arguments = { amount = 5 } }]"#;
    let status = r#"{ tool = "status", arguments = { request_id = "r1" }"#;
    let reading = ScenarioVariant::of(
        "mcp/counter.toml",
        "status-read",
        added,
        &format!("calls = [{{ tool = \"add\", arguments = {{ amount = 5 }} }}, {status}, read = true }}]"),
    );
    let replayed = expect(
        &["replay", &reading.path(), "--tape", "0", "--width", "400"],
        0,
    );
    assert!(replayed.contains("handle B#1 -> answered 5"), "{replayed}");
    let clean = expect(&["check", &reading.path(), "--faults-max", "0"], 3);
    assert!(clean.contains("bound: exhausted"), "{clean}");
    assert!(clean.contains("replay-fidelity          clean"), "{clean}");
}
