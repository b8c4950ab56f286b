//! A counter as an HTTP service in Rust: axum on tokio, tokio-postgres, as people write one.
//!
//! `POST /add` with the JSON body `{"amount": N}` and an `Idempotency-Key` header adds N to a
//! counter and answers `{"total": T}`; a retry with the same key is answered with the saved
//! total (200), the same key with another amount is 422, a missing key is 400. It connects to
//! the database named by `DATABASE_URL` (retrysim runs its own PostgreSQL and gives it one),
//! makes its schema, and listens on 127.0.0.1 at the port in `PORT`; each request takes a
//! connection of a small pool, in READ COMMITTED, PostgreSQL's default.
//!
//! `VARIANT` says how the key is kept, as `examples/http/counter_pg.py` does:
//!
//! * `lookup` (faulty): look the key up, then add and save the key in one transaction, with
//!   no unique constraint on the key: a retry in flight beside its original misses it too.
//! * `on-conflict` (correct): claim the key first with `INSERT ... ON CONFLICT DO NOTHING` on
//!   its primary key, in the addition's own transaction: a retry beside its original waits on
//!   the original's uncommitted key, then replays it.
//! * `second-transaction` (faulty): add in one transaction, save the key in a second; a crash
//!   between them (`between-transactions`) loses the key.
//!
//! Crash points come from `helpers/retrysim_points.rs`, one `Points` per request, asked inside
//! `block_in_place`; outside retrysim they do nothing.

#[path = "../../../helpers/retrysim_points.rs"]
#[allow(dead_code)] // the service asks crash points only, on a Points of each request
mod retrysim_points;

mod pool;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use pool::Pool;
use retrysim_points::Points;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio_postgres::{Client, GenericClient};

/// How many database connections the service keeps.
const POOL_SIZE: usize = 4;

/// The answer to a request: its status and JSON body.
type Answer = (StatusCode, Json<Value>);

/// The service's state: its pool of connections and its variant.
struct Service {
    pool: Pool,
    variant: String,
}

/// A failure of the database, answered 500.
fn failed(error: tokio_postgres::Error) -> Answer {
    let body = json!({"error": error.to_string()});
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body))
}

/// The answer to a retry of `key` whose record is `(amount, total)`.
fn replay(record: (i32, Option<i32>), amount: i32) -> Answer {
    if record.0 != amount {
        let body = json!({"error": "the key was used with another amount"});
        return (StatusCode::UNPROCESSABLE_ENTITY, Json(body));
    }
    (StatusCode::OK, Json(json!({"total": record.1})))
}

/// Asks the crash point `name`, letting the runtime's other tasks go on meanwhile.
fn point(points: &mut Points, name: &str) {
    tokio::task::block_in_place(|| points.point(name));
}

async fn add(client: &impl GenericClient, amount: i32) -> Result<i32, tokio_postgres::Error> {
    let row = client
        .query_one(
            "UPDATE counter SET total = total + $1 WHERE id = 1 RETURNING total",
            &[&amount],
        )
        .await?;
    Ok(row.get(0))
}

async fn saved(
    client: &impl GenericClient,
    key: &str,
) -> Result<Option<(i32, Option<i32>)>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT amount, total FROM idempotency_keys WHERE key = $1",
            &[&key],
        )
        .await?;
    Ok(row.map(|row| (row.get(0), row.get(1))))
}

async fn handle_lookup(
    client: &mut Client,
    key: &str,
    amount: i32,
) -> Result<Answer, tokio_postgres::Error> {
    let mut points = Points::new();
    let transaction = client.transaction().await?;
    if let Some(record) = saved(&transaction, key).await? {
        return Ok(replay(record, amount));
    }
    point(&mut points, "after-lookup");
    let total = add(&transaction, amount).await?;
    transaction
        .execute(
            "INSERT INTO idempotency_keys VALUES ($1, $2, $3)",
            &[&key, &amount, &total],
        )
        .await?;
    transaction.commit().await?;
    Ok((StatusCode::OK, Json(json!({"total": total}))))
}

async fn handle_on_conflict(
    client: &mut Client,
    key: &str,
    amount: i32,
) -> Result<Answer, tokio_postgres::Error> {
    let mut points = Points::new();
    let transaction = client.transaction().await?;
    let claimed = transaction
        .query_opt(
            "INSERT INTO idempotency_keys (key, amount) VALUES ($1, $2) \
             ON CONFLICT (key) DO NOTHING RETURNING key",
            &[&key, &amount],
        )
        .await?;
    if claimed.is_none() {
        let record = saved(&transaction, key)
            .await?
            .expect("a conflict on the key");
        return Ok(replay(record, amount));
    }
    point(&mut points, "after-claim");
    let total = add(&transaction, amount).await?;
    transaction
        .execute(
            "UPDATE idempotency_keys SET total = $1 WHERE key = $2",
            &[&total, &key],
        )
        .await?;
    transaction.commit().await?;
    Ok((StatusCode::OK, Json(json!({"total": total}))))
}

async fn handle_second_transaction(
    client: &mut Client,
    key: &str,
    amount: i32,
) -> Result<Answer, tokio_postgres::Error> {
    let mut points = Points::new();
    let transaction = client.transaction().await?;
    if let Some(record) = saved(&transaction, key).await? {
        return Ok(replay(record, amount));
    }
    let total = add(&transaction, amount).await?;
    transaction.commit().await?;
    point(&mut points, "between-transactions");
    client
        .execute(
            "INSERT INTO idempotency_keys VALUES ($1, $2, $3)",
            &[&key, &amount, &total],
        )
        .await?;
    Ok((StatusCode::OK, Json(json!({"total": total}))))
}

/// `POST /add`.
async fn post_add(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    body: Json<Value>,
) -> Answer {
    let Some(amount) = body.get("amount").and_then(Value::as_i64) else {
        let error = json!({"error": "the body must be {\"amount\": N}"});
        return (StatusCode::BAD_REQUEST, Json(error));
    };
    let key = headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok());
    let Some(key) = key.filter(|key| !key.is_empty()) else {
        let error = json!({"error": "the Idempotency-Key header is required"});
        return (StatusCode::BAD_REQUEST, Json(error));
    };
    let amount = i32::try_from(amount).unwrap_or(i32::MAX);
    let mut client = service.pool.connection().await;
    let answered = match service.variant.as_str() {
        "lookup" => handle_lookup(&mut client, key, amount).await,
        "second-transaction" => handle_second_transaction(&mut client, key, amount).await,
        _ => handle_on_conflict(&mut client, key, amount).await,
    };
    answered.unwrap_or_else(failed)
}

/// Makes the schema: the key's column is the primary key only in the `on-conflict` variant.
async fn make_schema(client: &Client, variant: &str) -> Result<(), tokio_postgres::Error> {
    let unique = if variant == "on-conflict" {
        "PRIMARY KEY"
    } else {
        ""
    };
    client
        .batch_execute(&format!(
            "BEGIN; \
             CREATE TABLE IF NOT EXISTS counter (id integer PRIMARY KEY, total integer NOT NULL); \
             INSERT INTO counter VALUES (1, 0) ON CONFLICT DO NOTHING; \
             CREATE TABLE IF NOT EXISTS idempotency_keys (key text {unique}, amount integer, \
             total integer); \
             COMMIT;"
        ))
        .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let variant = std::env::var("VARIANT").unwrap_or_else(|_| "on-conflict".into());
    let pool = Pool::connect(POOL_SIZE).await;
    make_schema(&*pool.connection().await, &variant)
        .await
        .expect("the schema is made");
    let service = Arc::new(Service { pool, variant });
    let app = Router::new()
        .route("/add", post(post_add))
        .with_state(service);
    pool::serve(app).await;
}
