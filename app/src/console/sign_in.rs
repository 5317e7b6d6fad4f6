//! Signing in (a one-time code or an operator token) and out.

use std::time::Instant;

use askama::Template;
use axum::extract::State;
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use crewbus_domain::BusError;
use serde::Deserialize;

use super::Console;
use super::failure;
use super::frame::{Chrome, Fields, PageQuery, Peer, Signed, html};
use super::security::{
    CSRF_FIELD, RETRY_AFTER, SESSION_COOKIE, SIGN_IN_COOKIE, cookie, csrf_matches, csrf_token,
    see_other, set_cookie,
};
use super::views::filters;
use crate::usecases::token::new_session_secret;

/// The pre-session cookie's path: only the sign-in page sees it.
const SIGN_IN_PATH: &str = "/console/sign-in";

#[derive(Template)]
#[template(path = "console/sign_in.html")]
struct SignInPage {
    chrome: Chrome,
    /// The code field's value (from `?code=`, or what was typed).
    code: String,
    csrf: String,
    /// Why the last attempt was refused.
    alert: Option<String>,
}

/// `GET /console/sign-in?code=`.
#[derive(Deserialize)]
pub(crate) struct Prefill {
    #[serde(default)]
    code: Option<String>,
}

/// Never prints the code.
impl std::fmt::Debug for Prefill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefill")
            .field("code", &self.code.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// The sign-in page with `code` in its form, `alert` shown, and the form's pre-session token
/// (a new pre-session secret when the browser has none).
fn form_page(
    console: &Console,
    headers: &HeaderMap,
    status: StatusCode,
    code: &str,
    alert: Option<String>,
) -> Response {
    let (pre, fresh) = match cookie(headers, SIGN_IN_COOKIE).filter(|v| well_formed(v)) {
        Some(pre) => (pre, false),
        None => (new_session_secret(), true),
    };
    let mut r = html(
        status,
        &SignInPage {
            chrome: Chrome::anonymous(),
            code: code.to_owned(),
            csrf: csrf_token(&pre),
            alert,
        },
    );
    if fresh {
        r.headers_mut().append(
            SET_COOKIE,
            set_cookie(SIGN_IN_COOKIE, Some(&pre), SIGN_IN_PATH, console.secure()),
        );
    }
    r
}

/// A pre-session secret as this server makes them: 64 hex digits.
fn well_formed(v: &str) -> bool {
    v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `GET /console/sign-in[?code=…]`: the form (code pre-filled from the URL `crewbus serve`
/// printed; the POST signs in).
pub(crate) async fn form(
    State(console): State<Console>,
    headers: HeaderMap,
    PageQuery(prefill): PageQuery<Prefill>,
) -> Response {
    let code = prefill.code.unwrap_or_default();
    form_page(&console, &headers, StatusCode::OK, code.trim(), None)
}

/// `POST /console/sign-in` (`_csrf`, `code` or `token`): `303` to `/console` with the session
/// cookie; a refused code or token `401` with the reason shown; a client with too many failed
/// sign-ins `429` with `Retry-After`; a form without its pre-session token `403`.
pub(crate) async fn submit(
    State(console): State<Console>,
    Peer(client): Peer,
    headers: HeaderMap,
    fields: Fields,
) -> Response {
    let code = fields.text("code").unwrap_or("").to_owned();
    // Counted as failed from now on, until forgiven: concurrent guesses each take a place.
    let attempt = match console.throttle.begin(client, Instant::now()) {
        Ok(at) => at,
        Err(wait) => {
            // One line per period, counting the refusals since the last one (from any address).
            if let Some(refused) = console.throttle.warn_throttled(Instant::now()) {
                tracing::warn!(
                    %client,
                    refused,
                    "console sign-ins refused: too many failed sign-ins from one address (this \
                     one's address; `refused` counts them since the last such warning)"
                );
            }
            return too_many(&console, &headers, &code, wait);
        }
    };
    let forgive = || console.throttle.forgive(client, attempt);
    let pre = cookie(&headers, SIGN_IN_COOKIE).unwrap_or_default();
    if pre.is_empty() || !csrf_matches(&pre, fields.get(CSRF_FIELD)) {
        forgive();
        return form_page(
            &console,
            &headers,
            StatusCode::FORBIDDEN,
            &code,
            Some(
                "This sign-in form was out of date (or not the console's). Nothing was tried: \
                 sign in again."
                    .to_owned(),
            ),
        );
    }
    let signed = match (fields.text("token"), code.as_str()) {
        (Some(token), _) => console.bus.sign_in_with_token(token).await,
        (None, code) if !code.is_empty() => console.bus.sign_in_with_code(code).await,
        (None, _) => {
            forgive();
            return form_page(
                &console,
                &headers,
                StatusCode::UNAUTHORIZED,
                "",
                Some("Enter the one-time code crewbus serve printed, or an operator token.".into()),
            );
        }
    };
    match signed {
        Ok(signed) => {
            forgive();
            tracing::info!(operator = %signed.operator.name, "console sign-in");
            see_other(
                super::PATH,
                &[
                    set_cookie(
                        SESSION_COOKIE,
                        Some(&signed.secret),
                        super::PATH,
                        console.secure(),
                    ),
                    set_cookie(SIGN_IN_COOKIE, None, SIGN_IN_PATH, console.secure()),
                ],
            )
        }
        Err(BusError::Unauthenticated) => {
            // Never the code or the token: which one was tried, and from where.
            let with = if fields.text("token").is_some() {
                "token"
            } else {
                "code"
            };
            if let Some(refused) = console.throttle.warn_refused(Instant::now()) {
                tracing::warn!(
                    %client,
                    with,
                    refused,
                    "console sign-in refused (this one's address and credential kind; `refused` \
                     counts refusals since the last such warning)"
                );
            }
            form_page(
                &console,
                &headers,
                StatusCode::UNAUTHORIZED,
                &code,
                Some(
                    "That did not sign you in. A code works once, for 10 minutes, and only the \
                     one the latest start of crewbus serve printed; a token must be an active \
                     operator's (cbo_…), not an agent's."
                        .into(),
                ),
            )
        }
        Err(e) => {
            forgive();
            failure::refusal(&e, None)
        }
    }
}

/// The sign-in page answered `429` with `Retry-After` (whole seconds, at least 1).
fn too_many(
    console: &Console,
    headers: &HeaderMap,
    code: &str,
    wait: std::time::Duration,
) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut r = form_page(
        console,
        headers,
        StatusCode::TOO_MANY_REQUESTS,
        code,
        Some(format!(
            "Too many failed sign-ins from this address. Try again in {secs} s."
        )),
    );
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        r.headers_mut().insert(RETRY_AFTER, v);
    }
    r
}

/// `POST /console/sign-out` (`_csrf`): ends the session (its live streams on this server end at
/// once), `303` to the sign-in page.
pub(crate) async fn sign_out(
    State(console): State<Console>,
    s: Signed,
    fields: Fields,
) -> Response {
    if let Some(refused) = s.csrf_refusal(&fields) {
        return refused;
    }
    if let Err(e) = console.bus.sign_out(s.secret()).await {
        return s.refuse(e);
    }
    let _ = console.ended.send(s.hash());
    tracing::info!(operator = %s.operator().name, "console sign-out");
    see_other(
        SIGN_IN_PATH,
        &[set_cookie(
            SESSION_COOKIE,
            None,
            super::PATH,
            console.secure(),
        )],
    )
}
