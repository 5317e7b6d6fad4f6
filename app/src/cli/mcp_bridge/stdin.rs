//! The bridge's stdin, checked line by line before rmcp's stdio transport reads it.
//!
//! rmcp's transport ignores a line that is not JSON (as the official SDKs do, so that a peer
//! echoing errors cannot start a storm). The bridge answers such a line itself, as JSON-RPC 2.0
//! asks, which tells a person typing into it, or a host with a bug, what went wrong:
//!
//! - a line whose JSON syntax is broken: `-32700` (parse error), `"id": null`;
//! - JSON that is not a message rmcp reads (no `"jsonrpc": "2.0"`, a `method` that is not a
//!   string, an array…): `-32600` (invalid request) with the line's `id` when it has one that is
//!   a string or an integer, else `"id": null`; one shaped as a notification (an object with a
//!   string `method` and no `id`) is never answered, as JSON-RPC 2.0 wants, and dropped with a
//!   stderr line;
//! - an `initialize` request without valid params (rmcp would read it as some other request, and
//!   the server's answer would be about something else): `-32602` (invalid params) with its id.
//!
//! Those lines are not passed on; every other line goes on unchanged through an in-memory pipe
//! (rmcp thus never answers a line itself: every answer is written by the bridge's one writer,
//! which writes `"id": null` where rmcp's types leave the id out). A line longer than rmcp's
//! limit is dropped with a stderr line, as rmcp would drop it.

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorData, JsonRpcRequest, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use serde::Deserialize as _;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// Bytes the pipe between the check and rmcp's transport holds.
const PIPE_BYTES: usize = 64 * 1024;

/// Reads `input` to its end in a task of its own; returns what rmcp's transport reads: the
/// lines that are messages. A line that is not is answered on `out` (see the module docs).
pub(crate) fn syntax_checked(
    input: impl AsyncRead + Unpin + Send + 'static,
    out: mpsc::UnboundedSender<ServerJsonRpcMessage>,
) -> tokio::io::DuplexStream {
    let (checked, mut pipe) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(async move {
        let mut input = tokio::io::BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            let limit = DEFAULT_MAX_LINE_LENGTH as u64 + 1;
            match (&mut input).take(limit).read_until(b'\n', &mut line).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    eprintln!("crewbus mcp: cannot read stdin: {e}");
                    break;
                }
            }
            if line.len() > DEFAULT_MAX_LINE_LENGTH && line.last() != Some(&b'\n') {
                eprintln!(
                    "crewbus mcp: a stdin line is longer than {DEFAULT_MAX_LINE_LENGTH} bytes; \
                     dropped"
                );
                if skip_line(&mut input).await.is_err() {
                    break;
                }
                continue;
            }
            match check(&line) {
                Verdict::Pass => {}
                Verdict::Answer(answer) => {
                    let _ = out.send(*answer);
                    continue;
                }
                Verdict::Drop => continue,
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            if pipe.write_all(&line).await.is_err() {
                // rmcp's transport stopped reading: the bridge is ending.
                break;
            }
        }
        let _ = pipe.shutdown().await;
    });
    checked
}

/// Reads up to the end of the current line (or of the input).
async fn skip_line<R: tokio::io::AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<()> {
    loop {
        let (done, used) = {
            let buf = input.fill_buf().await?;
            if buf.is_empty() {
                return Ok(());
            }
            match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (true, i + 1),
                None => (false, buf.len()),
            }
        };
        input.consume(used);
        if done {
            return Ok(());
        }
    }
}

/// What becomes of one stdin line.
#[derive(Debug)]
enum Verdict {
    /// A message rmcp reads (or a blank line): passed on.
    Pass,
    /// Not a message: answered, not passed on.
    Answer(Box<ServerJsonRpcMessage>),
    /// An invalid notification: never answered, not passed on.
    Drop,
}

/// The verdict on `line` (see the module docs).
fn check(line: &[u8]) -> Verdict {
    let text = line.trim_ascii();
    // A byte order mark may open a JSON text (RFC 8259 §8.1); rmcp steps over it too.
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    if text.is_empty() {
        return Verdict::Pass;
    }
    let value = match serde_json::from_slice::<Value>(text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("crewbus mcp: a stdin line is not JSON ({e}); answered with a parse error");
            return Verdict::Answer(Box::new(ServerJsonRpcMessage::error(
                ErrorData::parse_error(format!("parse error: {e}"), None),
                None,
            )));
        }
    };
    let id = value
        .get("id")
        .and_then(|id| RequestId::deserialize(id).ok());
    match ClientJsonRpcMessage::deserialize(&value) {
        Ok(ClientJsonRpcMessage::Request(JsonRpcRequest { request, id, .. }))
            if request.method() == "initialize"
                && !matches!(request, ClientRequest::InitializeRequest(_)) =>
        {
            eprintln!("crewbus mcp: an initialize request without valid params; answered -32602");
            Verdict::Answer(Box::new(ServerJsonRpcMessage::error(
                ErrorData::invalid_params(
                    "initialize needs params {protocolVersion, capabilities, clientInfo}",
                    None,
                ),
                Some(id),
            )))
        }
        Ok(_) => Verdict::Pass,
        Err(e) => {
            let notification =
                value.get("id").is_none() && value.get("method").is_some_and(Value::is_string);
            if notification {
                eprintln!(
                    "crewbus mcp: a stdin notification is not a valid message ({e}); dropped"
                );
                return Verdict::Drop;
            }
            eprintln!(
                "crewbus mcp: a stdin line is not a JSON-RPC 2.0 message ({e}); answered -32600"
            );
            Verdict::Answer(Box::new(ServerJsonRpcMessage::error(
                ErrorData::invalid_request(format!("invalid request: {e}"), None),
                id,
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_pass_unchanged_and_other_lines_are_answered() {
        let input: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\
            {not json\n\n   \n[1, 2]\n\xff\xfe\n{\"id\":4,\"method\":\"ping\"}\n\
            {\"jsonrpc\":\"1.0\",\"id\":\"x\",\"method\":\"ping\"}\n\
            {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":5}\n\
            {\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"initialize\"}\n\
            {\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
        let (out, mut answers) = mpsc::unbounded_channel();
        let mut checked = syntax_checked(input, out);
        let mut passed = String::new();
        checked.read_to_string(&mut passed).await.unwrap();
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n   \n\
             {\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        );
        let mut got = Vec::new();
        while let Ok(a) = answers.try_recv() {
            let v = serde_json::to_value(&a).unwrap();
            got.push((v["error"]["code"].as_i64().unwrap(), v.get("id").cloned()));
        }
        use serde_json::json;
        assert_eq!(
            got,
            [
                (-32700, None),
                (-32600, None),
                (-32700, None),
                (-32600, Some(json!(4))),
                (-32600, Some(json!("x"))),
                (-32602, Some(json!(5))),
            ],
            "the broken line, the array, the invalid UTF-8, the two invalid requests with \
             their ids, the initialize without params; the invalid notification unanswered \
             (the writer adds \"id\": null where none)"
        );
    }
}
