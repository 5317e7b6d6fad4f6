//! A small client of the HTTP API (reqwest, plain HTTP), used by `crewbus demo` and the
//! end-to-end tests. It speaks JSON values so callers can look at exactly what the API returns.

use std::time::Duration;

use crewbus_domain::{BusError, BusResult, Uuid};
use reqwest::Method;
use serde_json::{Value, json};

/// An agent's view of a crewbus server.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// A non-2xx answer: the status and the API's `{code, message}`.
#[derive(Debug, Clone)]
pub struct ApiFailure {
    /// HTTP status.
    pub status: u16,
    /// The error code.
    pub code: String,
    /// The message.
    pub message: String,
}

impl ApiClient {
    /// A client of `base` (e.g. `http://127.0.0.1:7700`) presenting `token`, if any.
    pub fn new(base: impl Into<String>, token: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("a plain HTTP client builds");
        ApiClient {
            http,
            base: base.into(),
            token,
        }
    }

    /// Sends one request and returns the status and the body parsed as JSON (`Null` when the
    /// body is empty or not JSON). Errors: no answer → `Unavailable`.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> BusResult<(u16, Value)> {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| BusError::unavailable_from("crewbus server", e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| BusError::unavailable_from("crewbus server", e))?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// [`ApiClient::call`] expecting a 2xx answer; anything else is `Err(ApiFailure)`.
    pub async fn ok(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ApiFailure> {
        let (status, value) = self
            .call(method, path, body)
            .await
            .map_err(|e| ApiFailure {
                status: 0,
                code: e.code().to_owned(),
                message: e.to_string(),
            })?;
        if (200..300).contains(&status) {
            Ok(value)
        } else {
            Err(ApiFailure {
                status,
                code: value["code"].as_str().unwrap_or("").to_owned(),
                message: value["message"].as_str().unwrap_or("").to_owned(),
            })
        }
    }

    /// `POST /v1/conversations`.
    pub async fn create_conversation(
        &self,
        title: &str,
        members: &[Uuid],
    ) -> Result<Value, ApiFailure> {
        self.ok(
            Method::POST,
            "/v1/conversations",
            Some(json!({"title": title, "members": members})),
        )
        .await
    }

    /// `POST /v1/conversations/{id}/messages`.
    pub async fn send(
        &self,
        conversation: Uuid,
        request_id: &str,
        body: &str,
    ) -> Result<Value, ApiFailure> {
        self.ok(
            Method::POST,
            &format!("/v1/conversations/{conversation}/messages"),
            Some(json!({"request_id": request_id, "body": body})),
        )
        .await
    }

    /// `POST /v1/inbox/fetch`: the deliveries.
    pub async fn fetch(&self, limit: usize) -> Result<Vec<Value>, ApiFailure> {
        let v = self
            .ok(
                Method::POST,
                "/v1/inbox/fetch",
                Some(json!({"limit": limit})),
            )
            .await?;
        Ok(v["deliveries"].as_array().cloned().unwrap_or_default())
    }

    /// `POST /v1/inbox/confirm`: the results.
    pub async fn confirm(&self, deliveries: &[Uuid]) -> Result<Vec<Value>, ApiFailure> {
        let v = self
            .ok(
                Method::POST,
                "/v1/inbox/confirm",
                Some(json!({"deliveries": deliveries})),
            )
            .await?;
        Ok(v["results"].as_array().cloned().unwrap_or_default())
    }

    /// `GET /v1/conversations/{id}/messages?after_seq=&limit=`.
    pub async fn history(
        &self,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> Result<Value, ApiFailure> {
        self.ok(
            Method::GET,
            &format!(
                "/v1/conversations/{conversation}/messages?after_seq={after_seq}&limit={limit}"
            ),
            None,
        )
        .await
    }

    /// `GET /v1/messages/{id}/receipts`.
    pub async fn receipts(&self, message: Uuid) -> Result<Vec<Value>, ApiFailure> {
        let v = self
            .ok(
                Method::GET,
                &format!("/v1/messages/{message}/receipts"),
                None,
            )
            .await?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// `POST /v1/messages/{id}/acknowledge`.
    pub async fn acknowledge(&self, message: Uuid) -> Result<Value, ApiFailure> {
        self.ok(
            Method::POST,
            &format!("/v1/messages/{message}/acknowledge"),
            None,
        )
        .await
    }
}

/// A uuid field of a JSON value (`Uuid::nil()` when absent or malformed).
pub fn uuid_of(v: &Value) -> Uuid {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_default()
}
