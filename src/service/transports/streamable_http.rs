//! MCP's Streamable HTTP transport: the server is a child process that listens on a port of
//! 127.0.0.1 the harness picked (as a plain HTTP server does, [`HttpServer`]), and every
//! JSON-RPC message is the body of a `POST` to its one endpoint (`/mcp` unless the scenario
//! names another). The server answers a request with the JSON-RPC response as
//! `application/json`, or as a `text/event-stream` whose events carry it (and, before it,
//! any notifications and requests of the server's, which the harness does not take up); a
//! notification it takes with `202 Accepted`.
//!
//! The handshake's answer names the session (`Mcp-Session-Id`), which every later request
//! carries with the protocol version. Each client has a session of its own, opened at its
//! first call; a reconnect opens a new one, a run's end closes them (`DELETE`), and a
//! restarted server has none until each client opens its own again. Each message goes
//! on a connection of its own, so that the harness hears the side channel while a call is
//! in the server, and calls of a server that serves them concurrently overlap.

use super::http::HttpServer;
use super::stdio::PROTOCOL_VERSION;
use super::stdio::{check_handshake, initialize_params, offer, rpc_answer, Answer};
use crate::service::command::ServerCommand;
use crate::service::{Interrupted, Offer, Question, Said, ServiceError, Transport};
use crate::Crash;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The endpoint a Streamable HTTP server serves unless the scenario names another.
pub const MCP_ENDPOINT_DEFAULT: &str = "/mcp";

/// An MCP server run as a child process, spoken to over Streamable HTTP.
pub struct StreamableHttpServer {
    /// The process and its HTTP exchanges.
    http: HttpServer,
    /// The path of its MCP endpoint.
    endpoint: String,
    /// The session the next message goes in, as its handshake named it (`None` before, and
    /// for a server that names none).
    session: Option<String>,
    /// Each client's session (by client and its session's generation) on the running
    /// server, opened at its first call.
    sessions: BTreeMap<(u32, u32), Option<String>>,
    /// The id of the next JSON-RPC request, counting on across restarts.
    next_id: u64,
    /// The HTTP exchange of each JSON-RPC request sent and not answered yet, by the
    /// request's id.
    exchanges: BTreeMap<u64, u64>,
}

impl StreamableHttpServer {
    /// A server to run with `command`, told its port in the variable `port_env`, serving MCP
    /// at `endpoint`, that may ask at crash points and for the time over a side channel at
    /// `socket`.
    pub fn with_side_channel(
        command: ServerCommand,
        port_env: &str,
        endpoint: &str,
        socket: &Path,
    ) -> Result<Self, ServiceError> {
        Ok(StreamableHttpServer {
            http: HttpServer::with_side_channel(command, port_env, socket)?,
            endpoint: endpoint.to_string(),
            session: None,
            sessions: BTreeMap::new(),
            next_id: 1,
            exchanges: BTreeMap::new(),
        })
    }

    /// Keeps a warm spare from now on ([`HttpServer::keep_spare`]).
    pub fn keep_spare(&mut self) {
        self.http.keep_spare();
    }

    /// The session the running server named in its handshake.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The HTTP request that carries `message`, with the session when there is one.
    fn post(&self, message: &Value) -> Value {
        let mut headers = json!({
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
        });
        if let Some(session) = &self.session {
            headers["Mcp-Session-Id"] = json!(session);
        }
        json!({"method": "POST", "path": self.endpoint, "headers": headers, "body": message})
    }

    /// Sends the request `method` with `params` without waiting; its JSON-RPC id.
    fn send_request(&mut self, method: &str, params: &Value) -> Result<u64, ServiceError> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let exchange = self.http.send_call(&self.post(&message))?;
        self.exchanges.insert(id, exchange);
        Ok(id)
    }

    /// Sends a request and waits for its answer, going on past every crash point the server
    /// asks about and answering the time 0 (nothing here crashes it); the answer, and the
    /// HTTP response that carried it.
    fn request(&mut self, method: &str, params: &Value) -> Result<(Value, Value), ServiceError> {
        let id = self.send_request(method, params)?;
        let exchange = self.exchanges.remove(&id).expect("a request just sent");
        loop {
            match self.http.next(exchange)? {
                Said::Result(response) => {
                    let answer = self.answer_in(id, &response)?;
                    return answer.map(|result| (result, response));
                }
                Said::Asked(question) => {
                    let _ = self.http.reply(&question, Ok(0));
                }
            }
        }
    }

    /// Sends the notification `method`: the server takes it with a 2xx and no answer.
    fn notify(&mut self, method: &str) -> Result<(), ServiceError> {
        let message = json!({"jsonrpc": "2.0", "method": method});
        let exchange = self.http.send_call(&self.post(&message))?;
        loop {
            match self.http.next(exchange)? {
                Said::Result(response) => {
                    return match response["status"].as_u64() {
                        Some(200..=299) => Ok(()),
                        _ => Err(self.refused(method, &response)),
                    }
                }
                Said::Asked(question) => {
                    let _ = self.http.reply(&question, Ok(0));
                }
            }
        }
    }

    /// The answer to request `id` that the HTTP `response` carries: in a JSON body, or in
    /// an event of an event stream.
    fn answer_in(&mut self, id: u64, response: &Value) -> Result<Answer, ServiceError> {
        let status = response["status"].as_u64();
        if !matches!(status, Some(200..=299)) {
            return Err(self.refused(&format!("request {id}"), response));
        }
        let content_type = response["headers"]["content-type"]
            .as_str()
            .unwrap_or("")
            .to_ascii_lowercase();
        let messages = if content_type.starts_with("text/event-stream") {
            let stream = response["body"].as_str().unwrap_or("");
            event_messages(stream).map_err(ServiceError::Protocol)?
        } else {
            vec![response["body"].clone()]
        };
        for message in &messages {
            if let Some((answered, answer)) = rpc_answer(message)? {
                if answered == id {
                    return Ok(answer);
                }
            }
        }
        let body: String = response["body"].to_string().chars().take(200).collect();
        Err(ServiceError::Protocol(format!(
            "its HTTP response to request {id} ({content_type}) holds no answer to it: {body}"
        )))
    }

    /// The error for an HTTP response that is no answer: a status other than 2xx, or a
    /// connection that ended without one. The server is stopped: it failed the harness.
    fn refused(&mut self, what: &str, response: &Value) -> ServiceError {
        let (status, stderr) = self.http.stop();
        match response["status"].as_u64() {
            Some(code) => ServiceError::Protocol(format!(
                "it answered {what} with HTTP {code}: {}{}",
                response["body"]
                    .to_string()
                    .chars()
                    .take(200)
                    .collect::<String>(),
                crate::service::tail(&stderr)
            )),
            None => ServiceError::Lost {
                what: what.to_string(),
                why: (response["lost"].as_str())
                    .unwrap_or("the connection ended")
                    .to_string(),
                status,
                stderr,
            },
        }
    }
}

impl StreamableHttpServer {
    /// Opens a session with the handshake: `initialize`, whose answer names the session, then
    /// `notifications/initialized` in it; the handshake's answer. Later messages go in it.
    fn open_session(&mut self) -> Result<Value, ServiceError> {
        self.session = None;
        let (handshake, response) = self.request("initialize", &initialize_params())?;
        check_handshake(&handshake)?;
        self.session = response["headers"]["mcp-session-id"]
            .as_str()
            .map(str::to_string);
        self.notify("notifications/initialized")?;
        Ok(handshake)
    }

    /// Ends `session` on the server (`DELETE` of the endpoint in it), whatever it answers.
    fn close_session(&mut self, session: &str) -> Result<(), ServiceError> {
        let headers = json!({"Mcp-Session-Id": session, "MCP-Protocol-Version": PROTOCOL_VERSION});
        let request = json!({"method": "DELETE", "path": self.endpoint, "headers": headers});
        let exchange = self.http.send_call(&request)?;
        loop {
            match self.http.next(exchange)? {
                Said::Result(_) => return Ok(()),
                Said::Asked(question) => {
                    let _ = self.http.reply(&question, Ok(0));
                }
            }
        }
    }
}

impl Transport for StreamableHttpServer {
    fn start(&mut self) -> Result<Offer, ServiceError> {
        self.http.start()?;
        self.sessions.clear();
        self.exchanges.clear();
        let handshake = self.open_session()?;
        let (listed, _) = self.request("tools/list", &json!({}))?;
        offer(&handshake, &listed)
    }

    /// Each client's session is its own, and a reconnect opens a new one.
    fn in_session(&mut self, client: u32, generation: u32) -> Result<(), ServiceError> {
        if let Some(session) = self.sessions.get(&(client, generation)) {
            self.session = session.clone();
            return Ok(());
        }
        self.open_session()?;
        self.sessions
            .insert((client, generation), self.session.clone());
        Ok(())
    }

    fn has_sessions(&self) -> bool {
        true
    }

    fn end_sessions(&mut self) -> Result<(), ServiceError> {
        let sessions = std::mem::take(&mut self.sessions);
        for session in sessions.into_values().flatten() {
            self.close_session(&session)?;
        }
        Ok(())
    }

    fn send_call(&mut self, params: &Value) -> Result<u64, ServiceError> {
        self.send_request("tools/call", params)
    }

    fn next_until(
        &mut self,
        id: u64,
        look: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Option<Said>, ServiceError> {
        let exchange = *self
            .exchanges
            .get(&id)
            .expect("a call sent to the running server");
        match self.http.next_until(exchange, look)? {
            None => Ok(None),
            Some(Said::Asked(question)) => Ok(Some(Said::Asked(question))),
            Some(Said::Result(response)) => {
                self.exchanges.remove(&id);
                let answer = self.answer_in(id, &response)?;
                answer.map(|result| Some(Said::Result(result)))
            }
        }
    }

    fn reply(
        &mut self,
        question: &Question,
        answer: Result<u64, Crash>,
    ) -> Result<(), Interrupted> {
        self.http.reply(question, answer)
    }

    fn kill(&mut self) {
        self.http.kill();
    }

    fn is_running(&self) -> bool {
        self.http.is_running()
    }
}

/// The JSON messages in the `data` of the events of an event stream (`text/event-stream`):
/// an event's `data:` lines joined by newlines, events parted by a blank line; an event
/// with no data is skipped. Data that is not JSON is an error that quotes it.
fn event_messages(stream: &str) -> Result<Vec<Value>, String> {
    let mut messages = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in event_lines(stream).chain(std::iter::once("")) {
        if line.is_empty() {
            if !data.is_empty() {
                let text = data.join("\n");
                let message = serde_json::from_str(&text).map_err(|_| {
                    let quoted: String = text.chars().take(200).collect();
                    format!("an event of its stream holds data that is not JSON: {quoted:?}")
                })?;
                messages.push(message);
                data.clear();
            }
            continue;
        }
        if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    Ok(messages)
}

/// The lines of an event stream, ended by CR LF, LF or a lone CR (the event stream's
/// grammar allows each).
fn event_lines(stream: &str) -> impl Iterator<Item = &str> {
    let stream = stream
        .strip_suffix("\r\n")
        .or_else(|| stream.strip_suffix(['\r', '\n']))
        .unwrap_or(stream);
    let mut rest = (!stream.is_empty()).then_some(stream);
    std::iter::from_fn(move || {
        let text = rest?;
        match text.find(['\r', '\n']) {
            Some(end) => {
                let after = if text[end..].starts_with("\r\n") {
                    end + 2
                } else {
                    end + 1
                };
                rest = Some(&text[after..]);
                Some(&text[..end])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::event_messages;
    use serde_json::json;

    #[test]
    fn an_event_stream_gives_the_data_of_each_event() {
        let stream =
            "event: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: a comment\n\nid: 7\ndata: 2\n";
        let messages = event_messages(stream).expect("JSON data");
        assert_eq!(messages, vec![json!({"a": 1}), json!(2)]);
    }

    #[test]
    fn lines_may_end_with_a_lone_carriage_return() {
        let messages = event_messages("data: 1\r\rdata: {\"b\":\rdata: 2}\r\r").expect("JSON data");
        assert_eq!(messages, vec![json!(1), json!({"b": 2})]);
    }

    #[test]
    fn data_that_is_not_json_is_quoted() {
        let error = event_messages("data: {oops\n\n").expect_err("not JSON");
        assert!(error.contains("\"{oops\""), "{error}");
    }
}
