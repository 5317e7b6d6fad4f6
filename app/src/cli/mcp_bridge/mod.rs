//! `crewbus mcp`: a stdio MCP server that relays JSON-RPC to a crewbus server's Streamable HTTP
//! endpoint (`URL/mcp`), for hosts that launch MCP servers as subprocesses.
//!
//! The bridge maps nothing: every stdin line (one JSON-RPC message, MCP stdio transport) is
//! POSTed unchanged with the agent's bearer token, and every answer goes to stdout as one line —
//! an `application/json` body as it came, each `data:` event of a `text/event-stream` body as
//! its own line, nothing for `202 Accepted`. It only looks inside a message to learn its `id`
//! (to answer a failed request with a JSON-RPC error) and the protocol revision, which a
//! Streamable HTTP client must repeat in the `MCP-Protocol-Version` header: a request's own
//! `_meta["io.modelcontextprotocol/protocolVersion"]` (revision 2026-07-28, where every request
//! names it), else the revision an `initialize` result negotiated (the handshake-era revisions).
//! An `Mcp-Session-Id` the server returns is sent back likewise. An `initialize` request itself
//! goes without either header: it starts afresh. The standard routing headers of revision
//! 2026-07-28 are derived from the message as that revision defines them: `Mcp-Method` (its
//! `method`) and `Mcp-Name` (`params.name` of `tools/call` and `prompts/get`, `params.uri` of
//! `resources/*`, `params.taskId` of `tasks/*`), Base64-wrapped (`=?base64?…?=`) when the value
//! cannot travel as a bare header value; older revisions ignore them. No `Mcp-Param-*` headers
//! are sent: crewbus's tools annotate no argument for them.
//!
//! Each message is relayed in its own task, so a `fetch_inbox` that waits does not hold up a
//! `ping`; stdout lines are written by one writer task, never interleaved. On end of input the
//! bridge finishes the requests in flight, then exits 0.

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crewbus_domain::Secret;
use futures_util::StreamExt as _;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::cli::McpArgs;

/// The environment variable holding the agent's bearer token.
pub const TOKEN_ENV: &str = "CREWBUS_MCP_TOKEN";

/// The JSON-RPC error code of a request the bridge could not relay (server unreachable, an HTTP
/// error status, a stream that ended before the answer). `data.http_status` holds the HTTP
/// status when there was an answer.
pub const RELAY_ERROR: i64 = -32000;

/// JSON-RPC's code for a line that is not JSON.
const PARSE_ERROR: i64 = -32700;

/// How long connecting to the server may take. There is no overall timeout: a waiting
/// `fetch_inbox` legitimately holds its request for up to 50 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this much of an error answer's body is read (to relay a JSON-RPC error it carries).
const MAX_ERROR_BODY: usize = 64 * 1024;

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// Runs the bridge to the end of stdin. Exit codes: 0 after end of input; 2 when no token is
/// given (or the token file cannot be read, or the token is not a valid header value), or the
/// URL is not an http(s) URL; 1 when the async runtime or stdio fails.
pub fn main(args: McpArgs) -> ExitCode {
    let token = match token(args.token_file.as_deref()) {
        Ok(t) => t,
        Err(message) => {
            eprintln!("crewbus mcp: {message}");
            return ExitCode::from(2);
        }
    };
    let relay = match Relay::new(&args.url, &token) {
        Ok(r) => r,
        Err(message) => {
            eprintln!("crewbus mcp: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match super::runtime("crewbus mcp") {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(run(Arc::new(relay))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crewbus mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The token from `--token-file` when given, else from [`TOKEN_ENV`], trimmed. Errors (a message
/// naming the source, never the value): neither set, an unreadable file, an empty token.
fn token(file: Option<&Path>) -> Result<Secret, String> {
    let (token, source) = match file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (text, format!("the token file {}", path.display())),
            Err(e) => {
                return Err(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ));
            }
        },
        None => match std::env::var(TOKEN_ENV) {
            Ok(v) => (v, format!("${TOKEN_ENV}")),
            Err(_) => {
                return Err(format!(
                    "no token: set {TOKEN_ENV} to the agent's bearer token (or pass --token-file \
                     PATH); `crewbus serve` prints the dev agents' tokens and keeps them in \
                     dev-tokens.json"
                ));
            }
        },
    };
    let token = Secret::new(token.trim());
    if token.is_empty() {
        return Err(format!(
            "{source} is empty: it must hold the agent's bearer token"
        ));
    }
    Ok(token)
}

/// What every relayed request shares: the client, the endpoint, the credential, and the
/// session headers learnt from the server.
struct Relay {
    client: reqwest::Client,
    endpoint: String,
    authorization: HeaderValue,
    session: Mutex<HeaderMap>,
}

impl Relay {
    /// Errors (a message): `url` is not http(s), the token is not a valid header value.
    fn new(url: &str, token: &Secret) -> Result<Relay, String> {
        let base = url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--url must be an http:// or https:// URL, not {base:?}"
            ));
        }
        let endpoint = if base.ends_with("/mcp") {
            base.to_owned()
        } else {
            format!("{base}/mcp")
        };
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| "the token holds characters a header cannot carry".to_owned())?;
        authorization.set_sensitive(true);
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Relay {
            client,
            endpoint,
            authorization,
            session: Mutex::new(HeaderMap::new()),
        })
    }

    fn session_headers(&self) -> HeaderMap {
        self.session.lock().map(|h| h.clone()).unwrap_or_default()
    }

    fn remember(&self, name: &'static str, value: HeaderValue) {
        if let Ok(mut h) = self.session.lock() {
            h.insert(name, value);
        }
    }

    /// Relays one stdin line and sends every answer line to `out`.
    async fn relay(&self, line: String, out: &mpsc::UnboundedSender<String>) {
        let message: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                eprintln!(
                    "crewbus mcp: a stdin line is not JSON ({e}); answered with a parse error"
                );
                let _ = out.send(
                    json!({"jsonrpc": "2.0", "id": null,
                           "error": {"code": PARSE_ERROR, "message": format!("parse error: {e}")}})
                    .to_string(),
                );
                return;
            }
        };
        let ids = request_ids(&message);
        let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        let mut headers = if initialize {
            HeaderMap::new()
        } else {
            self.session_headers()
        };
        if let Some(version) = stated_revision(&message) {
            headers.insert(PROTOCOL_VERSION, version);
        }
        for (name, value) in routing_headers(&message) {
            headers.insert(name, value);
        }
        let fail = |error: RelayFailure| {
            eprintln!("crewbus mcp: POST {}: {}", self.endpoint, error.message);
            for id in &ids {
                let _ = out.send(error.answer(id).to_string());
            }
        };
        let response = self
            .client
            .post(&self.endpoint)
            .headers(headers)
            .header(AUTHORIZATION, self.authorization.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(line)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                return fail(RelayFailure {
                    message: format!("cannot reach crewbus: {}", error_chain(&e)),
                    status: None,
                });
            }
        };
        if let Some(session) = response.headers().get(SESSION_ID) {
            self.remember(SESSION_ID, session.clone());
        }
        let status = response.status();
        if !status.is_success() {
            return match error_body(response).await {
                // The server's own JSON-RPC answer (e.g. to a malformed request): relayed as is.
                Some(answer) if answer.get("jsonrpc").is_some() => {
                    eprintln!(
                        "crewbus mcp: POST {}: HTTP {status} with a JSON-RPC answer",
                        self.endpoint
                    );
                    let _ = out.send(answer.to_string());
                }
                body => fail(RelayFailure::status(status, body.as_ref())),
            };
        }
        if status == StatusCode::ACCEPTED {
            return;
        }
        let sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let mut answered = ids.is_empty();
        let mut emit = |data: &str| {
            let Ok(value) = serde_json::from_str::<Value>(data) else {
                eprintln!("crewbus mcp: the server sent an answer that is not JSON; dropped");
                return;
            };
            if is_answer_to(&value, &ids) {
                answered = true;
                if initialize
                    && let Some(version) = value
                        .pointer("/result/protocolVersion")
                        .and_then(Value::as_str)
                        .and_then(|v| HeaderValue::from_str(v).ok())
                {
                    self.remember(PROTOCOL_VERSION, version);
                }
            }
            let _ = out.send(one_line(data, &value));
        };
        let ended = if sse {
            let mut parser = SseParser::default();
            let mut body = response.bytes_stream();
            let mut ended = Ok(());
            while let Some(chunk) = body.next().await {
                match chunk {
                    Ok(bytes) => parser.feed(&bytes, &mut emit),
                    Err(e) => {
                        ended = Err(error_chain(&e));
                        break;
                    }
                }
            }
            ended
        } else {
            match response.bytes().await {
                Ok(bytes) => {
                    let text = String::from_utf8_lossy(&bytes);
                    if !text.trim().is_empty() {
                        emit(&text);
                    }
                    Ok(())
                }
                Err(e) => Err(error_chain(&e)),
            }
        };
        if !answered {
            fail(RelayFailure {
                message: match ended {
                    Ok(()) => "the answer ended before the reply to the request".to_owned(),
                    Err(e) => format!("the answer broke off before the reply: {e}"),
                },
                status: Some(status),
            });
        }
    }
}

/// Reads stdin to its end, relaying each line in its own task; one writer task owns stdout.
async fn run(relay: Arc<Relay>) -> std::io::Result<()> {
    let (out, mut lines_out) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut line) = lines_out.recv().await {
            line.push('\n');
            stdout.write_all(line.as_bytes()).await?;
            stdout.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let mut tasks = JoinSet::new();
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let relay = relay.clone();
        let out = out.clone();
        tasks.spawn(async move { relay.relay(line, &out).await });
        // Reap the finished ones so a long session does not accumulate handles.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    drop(out);
    writer.await.map_err(std::io::Error::other)?
}

/// Why a request could not be relayed, as a JSON-RPC error and a stderr line.
struct RelayFailure {
    message: String,
    status: Option<StatusCode>,
}

impl RelayFailure {
    /// An HTTP error status; `body` is the answer when it was JSON (crewbus's `{code, message}`).
    fn status(status: StatusCode, body: Option<&Value>) -> RelayFailure {
        let message = match status {
            StatusCode::UNAUTHORIZED => "HTTP 401: crewbus refused the token (wrong or revoked); \
                                         give the bridge an active agent's token"
                .to_owned(),
            StatusCode::NOT_FOUND => "HTTP 404: no MCP endpoint at this URL (is --url the \
                                      crewbus server's base URL?)"
                .to_owned(),
            other => match body.and_then(|b| b.get("message")).and_then(Value::as_str) {
                Some(m) => format!("HTTP {}: {m}", other.as_u16()),
                None => format!("HTTP {other}"),
            },
        };
        RelayFailure {
            message,
            status: Some(status),
        }
    }

    fn answer(&self, id: &Value) -> Value {
        let mut error = json!({"code": RELAY_ERROR, "message": self.message});
        if let Some(status) = self.status {
            error["data"] = json!({"http_status": status.as_u16()});
        }
        json!({"jsonrpc": "2.0", "id": id, "error": error})
    }
}

/// The ids of the requests in `message` (an object, or a batch array): those with a `method` and
/// an `id`. Notifications and responses have none to answer.
fn request_ids(message: &Value) -> Vec<Value> {
    let one = |m: &Value| match (m.get("method"), m.get("id")) {
        (Some(_), Some(id)) if !id.is_null() => Some(id.clone()),
        _ => None,
    };
    match message {
        Value::Array(batch) => batch.iter().filter_map(one).collect(),
        other => one(other).into_iter().collect(),
    }
}

/// The revision a message names itself (`params._meta["io.modelcontextprotocol/protocolVersion"]`,
/// of the first message of a batch), as a header value.
fn stated_revision(message: &Value) -> Option<HeaderValue> {
    let first = match message {
        Value::Array(batch) => batch.first()?,
        other => other,
    };
    let version = first
        .get("params")?
        .get("_meta")?
        .get("io.modelcontextprotocol/protocolVersion")?
        .as_str()?;
    HeaderValue::from_str(version).ok()
}

/// The standard routing headers of revision 2026-07-28 for one message (none for a batch or a
/// response): `Mcp-Method`, and `Mcp-Name` for the methods that name a target.
fn routing_headers(message: &Value) -> Vec<(&'static str, HeaderValue)> {
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(v) = HeaderValue::from_str(&header_text(method)) {
        out.push(("mcp-method", v));
    }
    let key = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(name) = key
        .and_then(|k| message.get("params")?.get(k)?.as_str())
        .and_then(|n| HeaderValue::from_str(&header_text(n)).ok())
    {
        out.push(("mcp-name", name));
    }
    out
}

/// `value` as a header value: as is, or `=?base64?<standard Base64>?=` when it starts or ends
/// with a space or tab, holds a character outside printable ASCII, or looks like that wrapping.
fn header_text(value: &str) -> String {
    use base64::Engine as _;
    let wrap = value.starts_with([' ', '\t'])
        || value.ends_with([' ', '\t'])
        || value.chars().any(|c| !(' '..='~').contains(&c))
        || (value.starts_with("=?base64?") && value.ends_with("?="));
    if wrap {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        format!("=?base64?{encoded}?=")
    } else {
        value.to_owned()
    }
}

/// Whether `value` (an object or a batch) is a response to one of `ids`.
fn is_answer_to(value: &Value, ids: &[Value]) -> bool {
    let one = |m: &Value| {
        (m.get("result").is_some() || m.get("error").is_some())
            && m.get("id").is_some_and(|id| ids.contains(id))
    };
    match value {
        Value::Array(batch) => batch.iter().any(one),
        other => one(other),
    }
}

/// `text` as one stdout line: unchanged unless it spans lines (the stdio transport forbids
/// embedded newlines), then compacted.
fn one_line(text: &str, value: &Value) -> String {
    if text.contains(['\n', '\r']) {
        value.to_string()
    } else {
        text.to_owned()
    }
}

/// An error answer's body as JSON, when it is JSON (read up to [`MAX_ERROR_BODY`]).
async fn error_body(response: reqwest::Response) -> Option<Value> {
    let mut body = response.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_ERROR_BODY {
            return None;
        }
    }
    serde_json::from_slice(&bytes).ok()
}

/// An error with its sources, `: `-joined (reqwest's own message is one word deep).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A minimal Server-Sent Events parser (the WHATWG event-stream format, as far as MCP uses it):
/// `data:` lines are joined with `\n` into an event, dispatched at a blank line; comments,
/// `event:`, `id:` and `retry:` are ignored, as are events without data (e.g. priming events).
/// Lines end with LF or CRLF. An event not closed by a blank line when the stream ends is
/// dropped, as the format requires.
#[derive(Default)]
struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds a chunk; calls `event` with each complete event's data.
    fn feed(&mut self, chunk: &[u8], event: &mut impl FnMut(&str)) {
        for &b in chunk {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, event);
        }
    }

    fn line_done(&mut self, line: &[u8], event: &mut impl FnMut(&str)) {
        if line.is_empty() {
            if let Some(data) = self.data.take().filter(|d| !d.is_empty()) {
                event(&data);
            }
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut parser = SseParser::default();
        let mut got = Vec::new();
        for c in chunks {
            parser.feed(c, &mut |d: &str| got.push(d.to_owned()));
        }
        got
    }

    #[test]
    fn sse_events_are_split_joined_and_filtered() {
        let stream: &[u8] = b": comment\n\nid: 1\nretry: 500\ndata:\n\n\
            event: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n\
            data:{\"b\":2}\n\ndata: {\"unfinished\":true}\n";
        assert_eq!(
            events(&[stream]),
            vec!["{\"a\":\n1}", "{\"b\":2}"],
            "data lines joined; empty (priming) events and the unfinished one dropped"
        );
        // Split anywhere, even inside a CRLF.
        let split: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&split), events(&[stream]));
    }

    #[test]
    fn only_requests_are_answered() {
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "x", "result": {}},
        ]);
        assert_eq!(request_ids(&batch), vec![json!(1)]);
        assert!(request_ids(&json!({"jsonrpc": "2.0", "method": "n"})).is_empty());
        assert!(is_answer_to(
            &json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            &[json!(1)]
        ));
        assert!(!is_answer_to(
            &json!({"jsonrpc": "2.0", "id": 2, "result": {}}),
            &[json!(1)]
        ));
        assert!(!is_answer_to(
            &json!({"jsonrpc": "2.0", "method": "notifications/progress"}),
            &[json!(1)]
        ));
    }

    #[test]
    fn routing_headers_name_the_method_and_its_target() {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "fetch_inbox", "arguments": {}}});
        let headers = routing_headers(&call);
        assert_eq!(
            headers[0],
            ("mcp-method", HeaderValue::from_static("tools/call"))
        );
        assert_eq!(
            headers[1],
            ("mcp-name", HeaderValue::from_static("fetch_inbox"))
        );
        let read = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                          "params": {"uri": "file:///é"}});
        let name = routing_headers(&read)[1].1.to_str().unwrap().to_owned();
        assert_eq!(name, "=?base64?ZmlsZTovLy/DqQ==?=");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(routing_headers(&note).len(), 1);
        assert!(routing_headers(&json!({"jsonrpc": "2.0", "id": 3, "result": {}})).is_empty());
        assert_eq!(header_text(" x"), "=?base64?IHg=?=");
        assert_eq!(header_text("plain-name_1"), "plain-name_1");
    }

    #[test]
    fn a_message_states_its_revision_in_its_meta() {
        let stated = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
        assert_eq!(stated_revision(&stated).unwrap(), "2026-07-28");
        assert_eq!(
            stated_revision(&json!([stated])).unwrap(),
            "2026-07-28",
            "a batch: its first message"
        );
        assert!(stated_revision(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).is_none());
    }

    #[test]
    fn the_token_is_required_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "  cbt_secret\n").unwrap();
        assert_eq!(token(Some(&file)).unwrap().expose(), "cbt_secret");
        std::fs::write(&file, " \n").unwrap();
        let empty = token(Some(&file)).err().unwrap();
        assert!(empty.contains("empty"), "{empty}");
        let missing = token(Some(&dir.path().join("nope"))).err().unwrap();
        assert!(missing.contains("nope"), "{missing}");
        let relay = Relay::new("http://127.0.0.1:1/", &Secret::new("cbt_secret")).unwrap();
        assert_eq!(relay.endpoint, "http://127.0.0.1:1/mcp");
        assert!(!format!("{:?}", relay.authorization).contains("cbt_secret"));
        assert!(Relay::new("127.0.0.1:7700", &Secret::new("t")).is_err());
        assert_eq!(
            Relay::new("http://h/mcp", &Secret::new("t"))
                .unwrap()
                .endpoint,
            "http://h/mcp"
        );
    }
}
