//! The orders service of `examples/http/orders_fastapi.py` in Rust: axum on tokio,
//! tokio-postgres, a small pool, the schema made at start-up, a `gen_random_uuid()` id and a
//! `created_at` in each row. No crash point and no helper: under retrysim its points are the
//! transactions PostgreSQL sees (the relay).
//!
//! `POST /orders` with `{"item": "...", "quantity": N}` and an `Idempotency-Key` header places
//! an order (201 and the order); a retry with the key is answered with the saved response, the
//! key with another body is 422, a missing key 400.
//!
//! `VARIANT` chooses the handler:
//! * `lookup-first` (faulty): the key looked up, then the order committed, then the key, with
//!   no unique constraint on it: two attempts in flight both place the order.
//! * `claim` (correct): the key claimed (`INSERT ... ON CONFLICT DO NOTHING`, the key the
//!   primary key) in the order's own transaction, the response saved in it.

#[path = "../pool.rs"]
mod pool;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use pool::Pool;
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

/// An order as it was asked for: its item, its quantity, and the request's canonical text
/// (the body's JSON with its keys sorted), which a retry must repeat.
struct Order {
    item: String,
    quantity: i32,
    request: String,
}

fn failed(error: tokio_postgres::Error) -> Answer {
    let body = json!({"error": error.to_string()});
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body))
}

/// The saved answer to the key's first request, or 422 for a request that is not it.
fn replay(
    (request, status, response): (String, Option<i32>, Option<String>),
    order: &Order,
) -> Answer {
    if request != order.request {
        let body = json!({"error": "the Idempotency-Key was used with another request"});
        return (StatusCode::UNPROCESSABLE_ENTITY, Json(body));
    }
    let status = (status.and_then(|status| u16::try_from(status).ok()))
        .and_then(|status| StatusCode::from_u16(status).ok())
        .unwrap_or(StatusCode::CONFLICT);
    let body = (response.as_deref())
        .and_then(|response| serde_json::from_str(response).ok())
        .unwrap_or_else(|| json!({"error": "the first request with this key is in progress"}));
    (status, Json(body))
}

async fn saved(
    client: &impl GenericClient,
    key: &str,
) -> Result<Option<(String, Option<i32>, Option<String>)>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT request, status, response FROM idempotency_keys WHERE key = $1",
            &[&key],
        )
        .await?;
    Ok(row.map(|row| (row.get(0), row.get(1), row.get(2))))
}

/// Places the order: its body, with the id the database gave it.
async fn place(client: &impl GenericClient, order: &Order) -> Result<Value, tokio_postgres::Error> {
    let row = client
        .query_one(
            "INSERT INTO orders (item, quantity) VALUES ($1, $2) RETURNING id::text",
            &[&order.item, &order.quantity],
        )
        .await?;
    let id: String = row.get(0);
    Ok(json!({"id": id, "item": order.item, "quantity": order.quantity}))
}

async fn lookup_first(
    client: &mut Client,
    key: &str,
    order: &Order,
) -> Result<Answer, tokio_postgres::Error> {
    if let Some(record) = saved(&*client, key).await? {
        return Ok(replay(record, order));
    }
    let transaction = client.transaction().await?;
    let body = place(&transaction, order).await?;
    transaction.commit().await?;
    let transaction = client.transaction().await?;
    transaction
        .execute(
            "INSERT INTO idempotency_keys (key, request, status, response) \
             VALUES ($1, $2, 201, $3)",
            &[&key, &order.request, &body.to_string()],
        )
        .await?;
    transaction.commit().await?;
    Ok((StatusCode::CREATED, Json(body)))
}

async fn claim(
    client: &mut Client,
    key: &str,
    order: &Order,
) -> Result<Answer, tokio_postgres::Error> {
    let transaction = client.transaction().await?;
    let claimed = transaction
        .query_opt(
            "INSERT INTO idempotency_keys (key, request) VALUES ($1, $2) \
             ON CONFLICT (key) DO NOTHING RETURNING key",
            &[&key, &order.request],
        )
        .await?;
    if claimed.is_none() {
        let record = saved(&transaction, key)
            .await?
            .expect("a conflict on the key");
        return Ok(replay(record, order));
    }
    let body = place(&transaction, order).await?;
    transaction
        .execute(
            "UPDATE idempotency_keys SET status = 201, response = $2 WHERE key = $1",
            &[&key, &body.to_string()],
        )
        .await?;
    transaction.commit().await?;
    Ok((StatusCode::CREATED, Json(body)))
}

async fn post_order(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Answer {
    let item = body.get("item").and_then(Value::as_str);
    let quantity = (body.get("quantity").and_then(Value::as_i64))
        .and_then(|quantity| i32::try_from(quantity).ok());
    let (Some(item), Some(quantity)) = (item, quantity) else {
        let error = json!({"error": "the body must be {\"item\": \"...\", \"quantity\": N}"});
        return (StatusCode::BAD_REQUEST, Json(error));
    };
    let key = headers
        .get("idempotency-key")
        .and_then(|key| key.to_str().ok());
    let Some(key) = key.filter(|key| !key.is_empty()) else {
        let error = json!({"error": "the Idempotency-Key header is required"});
        return (StatusCode::BAD_REQUEST, Json(error));
    };
    let order = Order {
        item: item.to_string(),
        quantity,
        // serde_json keeps an object's keys sorted: the same request is the same text.
        request: body.to_string(),
    };
    let mut client = service.pool.connection().await;
    let answered = match service.variant.as_str() {
        "claim" => claim(&mut client, key, &order).await,
        _ => lookup_first(&mut client, key, &order).await,
    };
    answered.unwrap_or_else(failed)
}

async fn make_schema(client: &Client, variant: &str) -> Result<(), tokio_postgres::Error> {
    let key_column = if variant == "claim" {
        "key text PRIMARY KEY"
    } else {
        "id uuid PRIMARY KEY DEFAULT gen_random_uuid(), key text"
    };
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS orders (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), \
             item text NOT NULL, quantity integer NOT NULL, \
             created_at timestamptz NOT NULL DEFAULT now()); \
             CREATE TABLE IF NOT EXISTS idempotency_keys ({key_column}, request text NOT NULL, \
             status integer, response text);"
        ))
        .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let variant = std::env::var("VARIANT").unwrap_or_else(|_| "lookup-first".into());
    let pool = Pool::connect(POOL_SIZE).await;
    make_schema(&*pool.connection().await, &variant)
        .await
        .expect("the schema is made");
    let service = Arc::new(Service { pool, variant });
    let app = Router::new()
        .route("/orders", post(post_order))
        .with_state(service);
    pool::serve(app).await;
}
