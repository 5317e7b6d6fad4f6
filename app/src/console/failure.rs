//! The console's refusals as pages: not found (also for a team outside the operator's scope),
//! a form without its CSRF token, a use case's refusal, and the way to the sign-in page.

use askama::Template;
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::BusError;

use super::frame::{Chrome, Frame, Signed, html};
use super::security::{SESSION_COOKIE, see_other, set_cookie};
use super::views::filters;
use crate::edge::error::status_for;

/// The error page.
#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage {
    chrome: Chrome,
    status: u16,
    title: &'static str,
    message: String,
}

/// `303` to the sign-in page; `forget` also removes the session cookie (its session is over).
pub(crate) fn to_sign_in(forget: bool, secure: bool) -> Response {
    let cookies = if forget {
        vec![set_cookie(SESSION_COOKIE, None, super::PATH, secure)]
    } else {
        vec![]
    };
    see_other("/console/sign-in", &cookies)
}

/// Why a page could not be shown: a use case refused, or a template did not render.
#[derive(Debug)]
pub(crate) enum Failed {
    Bus(BusError),
    Template(askama::Error),
}

impl From<BusError> for Failed {
    fn from(e: BusError) -> Self {
        Failed::Bus(e)
    }
}

impl From<askama::Error> for Failed {
    fn from(e: askama::Error) -> Self {
        Failed::Template(e)
    }
}

/// The page for `f`, in `frame`.
pub(crate) fn failed(f: &Failed, frame: Option<Frame>) -> Response {
    match f {
        Failed::Bus(e) => refusal(e, frame),
        Failed::Template(e) => {
            tracing::error!(error = %e, "a console template failed to render");
            page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The page failed to render",
                "The console could not draw this page. The server's log says why.".to_owned(),
                frame,
            )
        }
    }
}

/// The page for a use case's refusal `e`, in `frame` (the operator's, when signed in).
/// `Unauthenticated` (the session ended meanwhile) goes to the sign-in page; anything of a team
/// outside the scope came back as `NotFound` and reads exactly like an id that does not exist.
pub(crate) fn refusal(e: &BusError, frame: Option<Frame>) -> Response {
    let status = status_for(e);
    let (title, message) = match e {
        // A non-`Secure` removal also removes a `Secure` cookie over TLS, where only those exist.
        BusError::Unauthenticated => return to_sign_in(true, false),
        BusError::NotFound { .. } => ("Not found", not_found_text()),
        BusError::Invalid { reason } => ("Not accepted", reason.clone()),
        BusError::Conflict { reason } => ("Conflict", reason.clone()),
        BusError::Forbidden { reason } => ("Forbidden", reason.clone()),
        BusError::TooLarge { .. }
        | BusError::QuotaExceeded { .. }
        | BusError::RateLimited { .. } => ("Not accepted", e.to_string()),
        _ => {
            if status.is_server_error() {
                tracing::warn!(code = e.code(), error = ?e, "console request failed");
            }
            (
                "The bus could not answer",
                format!(
                    "The bus could not answer this request ({}). Try again in a moment.",
                    e.code()
                ),
            )
        }
    };
    page(status, title, message, frame)
}

fn not_found_text() -> String {
    "There is no such page, or it belongs to a team you may not see.".to_owned()
}

/// The `403` page for a POST without this session's CSRF token.
pub(crate) fn csrf_refused(frame: Option<Frame>) -> Response {
    page(
        StatusCode::FORBIDDEN,
        "Form refused",
        "This form did not carry the console's token (it may be from an older page, or not from \
         the console at all). Nothing was changed. Reload the page and try again."
            .to_owned(),
        frame,
    )
}

/// The error page with `status`.
pub(crate) fn page(
    status: StatusCode,
    title: &'static str,
    message: String,
    frame: Option<Frame>,
) -> Response {
    let mut chrome = Chrome::anonymous();
    chrome.frame = frame;
    html(
        status,
        &ErrorPage {
            chrome,
            status: status.as_u16(),
            title,
            message,
        },
    )
}

/// Anything else under `/console`: the console's 404 page (signed in), else the sign-in page.
pub(crate) async fn not_found(s: Signed) -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Not found",
        not_found_text(),
        Some(s.frame(super::frame::Section::None)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limited_console_action_is_a_429_page() {
        let r = refusal(
            &BusError::RateLimited {
                retry_after_seconds: 2,
            },
            None,
        );
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    }
}
