//! An outside service the harness runs on loopback for a server to call: a payment provider
//! with idempotency keys, like the payment domain's, spoken to over HTTP.
//!
//! `POST /charges` with a JSON body `{"amount": N}` charges once and answers
//! `{"id": "ch_1", "amount": N, "replayed": false}`. With an `Idempotency-Key` header a
//! second request under the same key answers the first charge again (`"replayed": true`)
//! and charges nothing; the same key with another amount is refused (409). The charges are
//! the harness's ground truth: the effects of a server that calls the provider.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// The most bytes of a request body the provider reads.
const BODY_BYTES_MAX: usize = 64 * 1024;

/// One charge the provider made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// The idempotency key it was made under, if any.
    pub key: Option<String>,
    /// Its amount.
    pub amount: i64,
}

/// The provider's record.
#[derive(Debug, Default)]
struct Ledger {
    charges: Vec<Charge>,
    /// Each key's charge, by its index in `charges`.
    by_key: BTreeMap<String, usize>,
}

/// A provider listening on loopback.
pub struct LoopbackProvider {
    address: String,
    ledger: Arc<Mutex<Ledger>>,
    closing: Arc<AtomicBool>,
}

impl LoopbackProvider {
    /// Starts a provider on a free port of 127.0.0.1.
    pub fn start() -> std::io::Result<LoopbackProvider> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let address = format!("http://{}", listener.local_addr()?);
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let closing = Arc::new(AtomicBool::new(false));
        let (kept, stop) = (Arc::clone(&ledger), Arc::clone(&closing));
        thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let ledger = Arc::clone(&kept);
                    super::workers::run(move || serve(stream, &ledger));
                }
            }
        });
        Ok(LoopbackProvider {
            address,
            ledger,
            closing,
        })
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Every charge made, in order.
    pub fn charges(&self) -> Vec<Charge> {
        self.ledger
            .lock()
            .expect("the provider's ledger")
            .charges
            .clone()
    }

    /// How many charges it has made.
    pub fn charge_count(&self) -> usize {
        self.ledger
            .lock()
            .expect("the provider's ledger")
            .charges
            .len()
    }

    /// Puts its record back to `charges` (a copy of [`LoopbackProvider::charges`]).
    pub fn restore(&self, charges: &[Charge]) {
        let mut ledger = self.ledger.lock().expect("the provider's ledger");
        *ledger = Ledger::default();
        for (index, charge) in charges.iter().enumerate() {
            if let Some(key) = &charge.key {
                ledger.by_key.entry(key.clone()).or_insert(index);
            }
            ledger.charges.push(charge.clone());
        }
    }

    /// Forgets every charge (for a fresh run).
    pub fn clear(&self) {
        *self.ledger.lock().expect("the provider's ledger") = Ledger::default();
    }
}

impl Drop for LoopbackProvider {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        // Wakes the listener so that its thread sees it is closing.
        let _ = TcpStream::connect(self.address.trim_start_matches("http://"));
    }
}

/// Answers one HTTP request on `stream`.
fn serve(stream: TcpStream, ledger: &Mutex<Ledger>) {
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let (status, body) = match read_request(&mut reader) {
        Some((line, key, body)) if line.starts_with("POST /charges ") => charge(ledger, key, &body),
        Some(_) => (404, r#"{"error":"only POST /charges"}"#.to_string()),
        None => return,
    };
    respond(writer, status, &body);
}

/// The request line, the idempotency key and the body of one request.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Option<String>, String)> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let (mut length, mut key) = (0, None);
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "idempotency-key" => key = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; length.min(BODY_BYTES_MAX)];
    reader.read_exact(&mut body).ok()?;
    Some((line, key, String::from_utf8(body).ok()?))
}

/// Charges `body`'s amount once per key: the status and the answer's body.
fn charge(ledger: &Mutex<Ledger>, key: Option<String>, body: &str) -> (u16, String) {
    let amount = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|value| value.get("amount").and_then(serde_json::Value::as_i64));
    let Some(amount) = amount else {
        return (
            400,
            r#"{"error":"the body must be {\"amount\": N}"}"#.to_string(),
        );
    };
    let mut ledger = ledger.lock().expect("the provider's ledger");
    if let Some(&index) = key.as_ref().and_then(|key| ledger.by_key.get(key)) {
        let earlier = &ledger.charges[index];
        if earlier.amount != amount {
            return (
                409,
                r#"{"error":"idempotency key reused with another amount"}"#.to_string(),
            );
        }
        let answer = serde_json::json!({"id": format!("ch_{}", index + 1), "amount": amount, "replayed": true});
        return (200, answer.to_string());
    }
    ledger.charges.push(Charge {
        key: key.clone(),
        amount,
    });
    let index = ledger.charges.len() - 1;
    if let Some(key) = key {
        ledger.by_key.insert(key, index);
    }
    let answer =
        serde_json::json!({"id": format!("ch_{}", index + 1), "amount": amount, "replayed": false});
    (200, answer.to_string())
}

/// Writes an HTTP response and closes the connection.
fn respond(mut stream: TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Conflict",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
