//! `crewbus mcp`: a stdio MCP server that relays to a crewbus server's Streamable HTTP endpoint
//! (`URL/mcp`), for hosts that launch MCP servers as subprocesses.
//!
//! The relay works at the transport level, on rmcp's two transports, and is not an MCP server
//! of its own (it answers nothing itself, so the host's session is with crewbus):
//!
//! - **Host side**: rmcp's stdio transport ([`AsyncRwTransport`] over stdin), one JSON-RPC
//!   message a line, read as rmcp's typed messages. rmcp ignores a line that is not JSON; the
//!   bridge checks each line before handing it on and answers one that is not a message itself
//!   (`stdin.rs`): `-32700` with `"id": null` for broken JSON, `-32600` with the line's id (or
//!   null) for JSON that is not a JSON-RPC 2.0 message, `-32602` for an `initialize` without
//!   params. Answers go to stdout through the bridge's one writer, one message a line; an error
//!   whose id could not be read carries `"id": null`, as JSON-RPC 2.0 requires (rmcp's types
//!   would leave it out).
//! - **Server side**: rmcp's Streamable HTTP client ([`StreamableHttpClientTransport`] over
//!   reqwest) with the agent's bearer token. It carries the session: the `Mcp-Session-Id` a
//!   server returns, the `MCP-Protocol-Version` header (from the `initialize` result, or a
//!   request's own `_meta` revision), the 2026-07-28 routing headers (`Mcp-Method`, `Mcp-Name`),
//!   SSE answers and their resumption (`upstream.rs`). Each host `initialize` opens a new one
//!   (a new handshake starts afresh: no session, no revision header); the old one finishes the
//!   requests it holds. A session that failed (its first request refused, the server gone) is
//!   replaced by the next message.
//! - **Errors**: a request the server answered with an HTTP error status, or that could not reach
//!   it, gets JSON-RPC error `-32000` ([`RELAY_ERROR`]) with `data.http_status` when there was an
//!   HTTP answer, and one stderr line saying why; one whose answer stream ended before its reply
//!   gets `-32000` without a status. A JSON-RPC error the server sent (with any status) is
//!   relayed as it came. Every request gets exactly one answer.
//! - **Channels** (`--channel`, `channel.rs`): the relayed `initialize` result declares
//!   `experimental["claude/channel"]`, and the bridge's own watch loop (`POST URL/v1/inbox/watch`)
//!   sends one `notifications/claude/channel` per batch of news; it hands nothing out.
//! - **Tool profile** (`--tools core|full`): sent as the `Crewbus-Tools` header.
//!
//! Messages are relayed concurrently (a `fetch_inbox` that waits does not hold up a `ping`);
//! stdout is written by one loop, one whole message a line. On end of input the bridge finishes
//! the requests in flight, then exits 0.

use std::path::Path;
use std::process::ExitCode;

use crewbus_domain::Secret;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, ServerJsonRpcMessage};
use rmcp::transport::Transport as _;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use crate::cli::McpArgs;
use crate::mcp::profile::Profile;

mod channel;
mod stdin;
mod upstream;

#[cfg(doc)]
use rmcp::transport::StreamableHttpClientTransport;

/// The environment variable holding the agent's bearer token.
pub const TOKEN_ENV: &str = "CREWBUS_MCP_TOKEN";

/// The JSON-RPC error code of a request the bridge could not relay (server unreachable, an HTTP
/// error status, a stream that ended before the answer). `data.http_status` holds the HTTP
/// status when there was an answer.
pub const RELAY_ERROR: i32 = -32000;

/// Where the bridge connects, with what, and what it adds.
#[derive(Clone)]
pub(crate) struct Settings {
    /// `…/mcp`.
    pub(crate) endpoint: String,
    pub(crate) token: Secret,
    /// The tool profile sent as the `Crewbus-Tools` header, when `--tools` is given.
    pub(crate) profile: Option<Profile>,
    /// `--channel`.
    pub(crate) channel: bool,
}

impl Settings {
    /// Errors (a message): `url` is not http(s).
    fn new(args: &McpArgs, token: Secret) -> Result<Settings, String> {
        let base = args.url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--url must be an http:// or https:// URL, not {base:?}"
            ));
        }
        let root = base.strip_suffix("/mcp").unwrap_or(base);
        Ok(Settings {
            endpoint: format!("{root}/mcp"),
            token,
            profile: args.tools.as_deref().and_then(Profile::named),
            channel: args.channel,
        })
    }
}

/// Runs the bridge to the end of stdin. Exit codes: 0 after end of input; 2 when no token is
/// given (or the token file cannot be read), or the URL is not an http(s) URL; 1 when the async
/// runtime or stdio fails.
pub fn main(args: McpArgs) -> ExitCode {
    let settings = match token(args.token_file.as_deref()).and_then(|t| Settings::new(&args, t)) {
        Ok(s) => s,
        Err(message) => {
            eprintln!("crewbus mcp: {message}");
            return ExitCode::from(2);
        }
    };
    let upstream = match upstream::Upstream::new(&settings) {
        Ok(u) => u,
        Err(message) => {
            eprintln!("crewbus mcp: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match super::runtime("crewbus mcp") {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(run(settings, upstream)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crewbus mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The token from `--token-file` when given, else from [`TOKEN_ENV`], trimmed. Errors (a message
/// naming the source, never the value): neither set, an unreadable file, an empty token, a token
/// a header cannot carry.
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
    if !token.expose().chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "{source} holds characters a header cannot carry: it must hold the agent's bearer \
             token"
        ));
    }
    Ok(token)
}

/// The relay: stdin (checked, then read by rmcp's stdio transport) to the current upstream
/// session; every session's answers, the check's answers and channel notifications to stdout,
/// in the order they come.
async fn run(settings: Settings, upstream: upstream::Upstream) -> std::io::Result<()> {
    let (out, mut answers) = mpsc::unbounded_channel::<ServerJsonRpcMessage>();
    let checked = stdin::syntax_checked(tokio::io::stdin(), out.clone());
    // The transport only reads: every line it could refuse was answered by the check.
    let mut host = AsyncRwTransport::<RoleServer, _, _>::new_server(checked, tokio::io::sink());
    let mut stdout = tokio::io::stdout();
    // Every sender of `out` ends at the end of input, so `answers` ends when all is written.
    let mut out = Some(out);
    let mut current: Option<upstream::Session> = None;
    let mut watch: Option<tokio::task::JoinHandle<()>> = None;
    let mut reading = true;
    loop {
        tokio::select! {
            message = host.receive(), if reading => {
                let Some(message) = message else {
                    reading = false;
                    current = None;
                    out = None;
                    if let Some(w) = watch.take() {
                        w.abort();
                    }
                    continue;
                };
                let Some(sender) = out.as_ref() else { continue };
                if settings.channel && watch.is_none() && starts_the_watch(&message) {
                    watch = Some(tokio::spawn(channel::watch(settings.clone(), sender.clone())));
                }
                if is_initialize(&message) {
                    current = None;
                }
                if let Some(message) = relay(&mut current, &upstream, sender, message) {
                    // The session ended meanwhile: a new one takes the message.
                    current = None;
                    let retry = relay(&mut current, &upstream, sender, message);
                    debug_assert!(retry.is_none(), "a new session takes a message");
                }
            }
            answer = answers.recv() => {
                let Some(answer) = answer else { break };
                // An error: the host closed stdout, nobody reads the answers any more.
                stdout.write_all(&line(&answer)?).await?;
                stdout.flush().await?;
            }
        }
    }
    host.close().await
}

/// `message` as one stdout line: its JSON and a newline; an error without an id gets
/// `"id": null` (JSON-RPC 2.0: the id is null when it could not be read).
fn line(message: &ServerJsonRpcMessage) -> std::io::Result<Vec<u8>> {
    let mut line = match message {
        ServerJsonRpcMessage::Error(e) if e.id.is_none() => {
            serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": null, "error": e.error}))
        }
        other => serde_json::to_vec(other),
    }?;
    line.push(b'\n');
    Ok(line)
}

/// Hands `message` to the current session (opening one when there is none); gives it back when
/// that session has ended.
fn relay(
    current: &mut Option<upstream::Session>,
    upstream: &upstream::Upstream,
    out: &mpsc::UnboundedSender<ServerJsonRpcMessage>,
    message: ClientJsonRpcMessage,
) -> Option<ClientJsonRpcMessage> {
    let session = current.get_or_insert_with(|| upstream.open(out.clone()));
    session.send(message)
}

fn is_initialize(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r)
        if matches!(r.request, ClientRequest::InitializeRequest(_)))
}

/// Whether the host is past its handshake once `message` is relayed: it sent
/// `notifications/initialized`, or a request other than `initialize` (a host of revision
/// 2026-07-28 has no handshake). Channel notifications start then, when the host listens.
fn starts_the_watch(message: &ClientJsonRpcMessage) -> bool {
    match message {
        ClientJsonRpcMessage::Notification(n) => {
            matches!(
                n.notification,
                ClientNotification::InitializedNotification(_)
            )
        }
        ClientJsonRpcMessage::Request(_) => !is_initialize(message),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> McpArgs {
        McpArgs {
            url: url.to_owned(),
            token_file: None,
            channel: false,
            tools: None,
        }
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
        std::fs::write(&file, "cbt_a\u{1}b").unwrap();
        let control = token(Some(&file)).err().unwrap();
        assert!(!control.contains("cbt_a"), "{control}");
        let missing = token(Some(&dir.path().join("nope"))).err().unwrap();
        assert!(missing.contains("nope"), "{missing}");
    }

    #[test]
    fn the_endpoints_come_from_the_base_url() {
        let s = Settings::new(&args("http://127.0.0.1:1/"), Secret::new("t")).unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:1/mcp");
        let s = Settings::new(&args("https://h/bus/mcp"), Secret::new("t")).unwrap();
        assert_eq!(s.endpoint, "https://h/bus/mcp");
        assert!(Settings::new(&args("127.0.0.1:7700"), Secret::new("t")).is_err());
    }

    #[test]
    fn an_error_without_an_id_is_written_with_id_null() {
        let parse =
            ServerJsonRpcMessage::error(rmcp::model::ErrorData::parse_error("p", None), None);
        let v: serde_json::Value = serde_json::from_slice(&line(&parse).unwrap()).unwrap();
        assert_eq!(v["id"], serde_json::Value::Null);
        assert!(v.as_object().unwrap().contains_key("id"), "{v}");
        assert_eq!(
            (&v["jsonrpc"], &v["error"]["code"]),
            (&"2.0".into(), &(-32700).into())
        );
        let with_id = ServerJsonRpcMessage::error(
            rmcp::model::ErrorData::invalid_request("r", None),
            Some(rmcp::model::NumberOrString::Number(4)),
        );
        let bytes = line(&with_id).unwrap();
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1);
        assert!(bytes.ends_with(b"\n"));
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["id"], 4);
    }

    #[test]
    fn the_watch_starts_after_the_handshake() {
        let m = |v: serde_json::Value| serde_json::from_value::<ClientJsonRpcMessage>(v).unwrap();
        let init = m(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "h", "version": "1"}}}),
        );
        assert!(is_initialize(&init) && !starts_the_watch(&init));
        let initialized = m(serde_json::json!({"jsonrpc": "2.0",
            "method": "notifications/initialized"}));
        assert!(starts_the_watch(&initialized));
        let list = m(serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        assert!(starts_the_watch(&list) && !is_initialize(&list));
        let progress = m(
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1}}),
        );
        assert!(!starts_the_watch(&progress));
    }
}
