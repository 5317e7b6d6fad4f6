//! The bridge's stdin, checked line by line before rmcp's stdio transport reads it.
//!
//! rmcp's transport ignores a line that is not JSON (as the official SDKs do, so that a peer
//! echoing errors cannot start a storm). The bridge has always answered such a line with a
//! JSON-RPC parse error (`-32700`), which tells a person typing into it, or a host with a bug,
//! what went wrong; this keeps that: a line whose JSON syntax is broken is answered here and
//! not passed on, every other line goes on unchanged through an in-memory pipe. A line longer
//! than rmcp's limit is dropped with a stderr line, as rmcp would drop it.

use rmcp::model::{ErrorData, ServerJsonRpcMessage};
use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// Bytes the pipe between the check and rmcp's transport holds.
const PIPE_BYTES: usize = 64 * 1024;

/// Reads `input` to its end in a task of its own; returns what rmcp's transport reads: the
/// lines that are JSON. A broken line is answered on `out`.
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
            if let Some(answer) = parse_error(&line) {
                let _ = out.send(answer);
                continue;
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

/// The answer to `line` when its JSON syntax is broken (a blank line is not answered).
fn parse_error(line: &[u8]) -> Option<ServerJsonRpcMessage> {
    let text = line.trim_ascii();
    if text.is_empty() {
        return None;
    }
    let e = serde_json::from_slice::<serde::de::IgnoredAny>(text).err()?;
    if !(e.is_syntax() || e.is_eof()) {
        return None;
    }
    eprintln!("crewbus mcp: a stdin line is not JSON ({e}); answered with a parse error");
    Some(ServerJsonRpcMessage::error(
        ErrorData::parse_error(format!("parse error: {e}"), None),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn json_lines_pass_unchanged_and_broken_ones_are_answered() {
        let input: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\
            {not json\n\n   \n[1, 2]\n\xff\xfe\n{\"tail\":true}";
        let (out, mut answers) = mpsc::unbounded_channel();
        let mut checked = syntax_checked(input, out);
        let mut passed = String::new();
        checked.read_to_string(&mut passed).await.unwrap();
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n   \n[1, 2]\n{\"tail\":true}\n"
        );
        let mut codes = Vec::new();
        while let Ok(a) = answers.try_recv() {
            let v = serde_json::to_value(&a).unwrap();
            codes.push(v["error"]["code"].as_i64().unwrap());
        }
        assert_eq!(
            codes,
            [-32700, -32700],
            "the broken line and the invalid UTF-8 one"
        );
    }
}
