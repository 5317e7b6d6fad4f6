//! A small client of the HTTP API (reqwest, plain HTTP), used by `crewbus lease check`, the
//! load generator (`crewbus-load`, in `benches/`), the example, the benches and the end-to-end
//! tests. It speaks JSON values so callers can look at exactly what the API returns.

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

    /// The server's base URL (no trailing `/`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token this client presents, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
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
        self.send_in(conversation, request_id, body, None).await
    }

    /// `POST /v1/conversations/{id}/messages` acting in `run` (its journal gets `MessageSent`).
    pub async fn send_in(
        &self,
        conversation: Uuid,
        request_id: &str,
        body: &str,
        run: Option<Uuid>,
    ) -> Result<Value, ApiFailure> {
        self.ok(
            Method::POST,
            &format!("/v1/conversations/{conversation}/messages"),
            Some(json!({"request_id": request_id, "body": body, "run": run})),
        )
        .await
    }

    /// `POST /v1/runs`: admits a run for the caller.
    pub async fn admit_run(&self) -> Result<Value, ApiFailure> {
        self.ok(Method::POST, "/v1/runs", None).await
    }

    /// `POST /v1/runs/{id}/resume`.
    pub async fn resume_run(&self, run: Uuid) -> Result<Value, ApiFailure> {
        self.ok(Method::POST, &format!("/v1/runs/{run}/resume"), None)
            .await
    }

    /// `POST /v1/runs/{id}/seal` with `outcome` (`succeeded`, `failed`, `cancelled`).
    pub async fn seal_run(
        &self,
        run: Uuid,
        outcome: &str,
        reason: &str,
    ) -> Result<Value, ApiFailure> {
        self.ok(
            Method::POST,
            &format!("/v1/runs/{run}/seal"),
            Some(json!({"outcome": outcome, "reason": reason})),
        )
        .await
    }

    /// `GET /v1/runs/{id}/records?from_seq=&limit=`: the records.
    pub async fn run_records(
        &self,
        run: Uuid,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Value>, ApiFailure> {
        let v = self
            .ok(
                Method::GET,
                &format!("/v1/runs/{run}/records?from_seq={from_seq}&limit={limit}"),
                None,
            )
            .await?;
        Ok(v["records"].as_array().cloned().unwrap_or_default())
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

    /// `POST /v1/inbox/fetch` with `wait_ms`: the status and the answer as JSON, so callers see
    /// an error answer too. The request may take `wait_ms` and a little more (its timeout is
    /// `wait_ms` + 30 s). Errors: no answer → `Unavailable`.
    pub async fn fetch_waiting(&self, limit: usize, wait_ms: u64) -> BusResult<(u16, Value)> {
        let mut req = self
            .http
            .post(format!("{}/v1/inbox/fetch", self.base))
            .timeout(Duration::from_millis(wait_ms) + Duration::from_secs(30))
            .json(&json!({"limit": limit, "wait_ms": wait_ms}));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| BusError::unavailable_from("crewbus server", e))?;
        let status = resp.status().as_u16();
        let value = resp.json().await.unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// `POST /v1/inbox/confirm`: the results.
    pub async fn confirm(&self, deliveries: &[Uuid]) -> Result<Vec<Value>, ApiFailure> {
        self.confirm_in(deliveries, None).await
    }

    /// `POST /v1/inbox/confirm` acting in `run` (its journal gets `MessageDelivered`).
    pub async fn confirm_in(
        &self,
        deliveries: &[Uuid],
        run: Option<Uuid>,
    ) -> Result<Vec<Value>, ApiFailure> {
        let v = self
            .ok(
                Method::POST,
                "/v1/inbox/confirm",
                Some(json!({"deliveries": deliveries, "run": run})),
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
        self.acknowledge_in(message, None).await
    }

    /// `POST /v1/messages/{id}/acknowledge` acting in `run` (its journal gets
    /// `MessageAcknowledged`).
    pub async fn acknowledge_in(
        &self,
        message: Uuid,
        run: Option<Uuid>,
    ) -> Result<Value, ApiFailure> {
        self.ok(
            Method::POST,
            &format!("/v1/messages/{message}/acknowledge"),
            Some(json!({"run": run})),
        )
        .await
    }
}

/// A uuid field of a JSON value (`Uuid::nil()` when absent or malformed).
pub fn uuid_of(v: &Value) -> Uuid {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_default()
}
