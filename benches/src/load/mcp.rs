//! `crewbus-load --transport mcp`: the agents send, fetch and confirm through the server's MCP
//! endpoint (`/mcp`) with rmcp's own client (Streamable HTTP over reqwest), as an agent host
//! does — `send_message`, `fetch_inbox`, `confirm_deliveries` — instead of the HTTP API. The
//! set-up (conversations) and the zero-loss check stay on the HTTP API.
//!
//! A tool's error result (`isError`, the text the HTTP API's error body `{code, message}`) is
//! read back as the HTTP failure of that code, so the tools' one retry rule
//! ([`super::retry::retry`]) treats both transports alike: `unavailable`, `timeout` and
//! `rate_limited` are retried, other codes are refusals; a transport error (no answer) is
//! status 0, retried.

use std::sync::Arc;

use crewbus::client::ApiFailure;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;

/// Which interface the simulated agents use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// The HTTP API (`/v1/…`).
    #[default]
    Http,
    /// The MCP endpoint (`/mcp`), through rmcp's client.
    Mcp,
}

/// One agent's MCP session (stateless on the server: the client's initialize, then calls).
pub struct McpAgent {
    service: RunningService<RoleClient, ()>,
}

/// The HTTP status an MCP error code stands for (the HTTP API's mapping, `http/error.rs`, so
/// retries agree).
fn status_of(code: &str) -> u16 {
    match code {
        "invalid" => 400,
        "unauthenticated" => 401,
        "forbidden" => 403,
        "not_found" => 404,
        "conflict" => 409,
        "too_large" => 413,
        "rate_limited" | "quota_exceeded" => 429,
        "insufficient_storage" => 507,
        "unavailable" | "timeout" | "not_provisioned" => 503,
        _ => 500,
    }
}

impl McpAgent {
    /// Connects to `base`/mcp presenting `token` and initializes the session. Errors: no answer
    /// or a refused initialize → status 0 (the caller retries it).
    pub async fn connect(base: &str, token: &str) -> Result<Arc<McpAgent>, ApiFailure> {
        let config = StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp"))
            .auth_header(token.to_owned());
        // rmcp's client needs the process's TLS provider to be built (`crewbus::tls`).
        crewbus::tls::install_crypto_provider();
        let transport = StreamableHttpClientTransport::from_config(config);
        let service = ().serve(transport).await.map_err(|e| ApiFailure {
            status: 0,
            code: String::new(),
            message: format!("MCP initialize failed: {e}"),
        })?;
        Ok(Arc::new(McpAgent { service }))
    }

    /// Calls `tool` with `arguments` (a JSON object); answers its `structuredContent`, or its
    /// error as the HTTP failure of its code.
    pub async fn call(&self, tool: &'static str, arguments: Value) -> Result<Value, ApiFailure> {
        let arguments: JsonObject = match arguments {
            Value::Object(o) => o,
            _ => JsonObject::new(),
        };
        let result = self
            .service
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
            .map_err(|e| ApiFailure {
                status: 0,
                code: String::new(),
                message: format!("{tool}: {e}"),
            })?;
        if result.is_error == Some(true) {
            let body: Value = result
                .content
                .first()
                .and_then(|c| c.as_text())
                .and_then(|t| serde_json::from_str(&t.text).ok())
                .unwrap_or(Value::Null);
            let code = body["code"].as_str().unwrap_or("internal").to_owned();
            return Err(ApiFailure {
                status: status_of(&code),
                message: body["message"].as_str().unwrap_or_default().to_owned(),
                code,
            });
        }
        result.structured_content.ok_or_else(|| ApiFailure {
            status: 500,
            code: "internal".into(),
            message: format!("{tool} answered no structuredContent"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_codes_map_to_retryable_statuses() {
        use crate::load::retry::transient;
        let failure = |code: &str| ApiFailure {
            status: status_of(code),
            code: code.into(),
            message: String::new(),
        };
        // As over HTTP: a team at its quota (429) is retried, as a rate limit is.
        for code in ["unavailable", "timeout", "rate_limited", "quota_exceeded"] {
            assert!(transient(&failure(code)), "{code}");
        }
        for code in [
            "invalid",
            "not_found",
            "conflict",
            "forbidden",
            "insufficient_storage",
        ] {
            assert!(!transient(&failure(code)), "{code}");
        }
    }
}
