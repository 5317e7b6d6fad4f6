//! What every page shares: the signed-in operator (the [`Signed`] extractor), the frame a page
//! is drawn in (nav, sign-out form, assets), the form fields of a POST and rendering.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use askama::Template;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use crewbus_domain::{BusError, Operator, OperatorScope, OperatorSession, TokenHash};

use super::Console;
use super::assets::{ASSETS, Assets};
use super::failure;
use super::security::{CSRF_FIELD, SESSION_COOKIE, cookie, csrf_matches, csrf_token};

/// Where a page belongs in the nav (`aria-current`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Push,
    Storage,
    /// A page of a team (under the overview).
    Team,
    /// The sign-in page and pages shown without a session.
    None,
}

/// The signed-in part of the frame: who, and the CSRF token the sign-out form carries.
#[derive(Clone)]
pub(crate) struct Frame {
    pub(crate) operator: String,
    pub(crate) csrf: String,
    pub(crate) section: Section,
}

/// Never prints the CSRF token (derived from the session secret).
impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("operator", &self.operator)
            .field("csrf", &"[redacted]")
            .field("section", &self.section)
            .finish()
    }
}

impl Frame {
    /// `aria-current="page"` for the nav entry of `section` (as an attribute value test).
    pub(crate) fn is(&self, section: &str) -> bool {
        matches!(
            (self.section, section),
            (Section::Overview, "overview")
                | (Section::Team, "overview")
                | (Section::Push, "push")
                | (Section::Storage, "storage")
        )
    }
}

/// What `base.html` draws around every page.
#[derive(Debug, Clone)]
pub(crate) struct Chrome {
    pub(crate) assets: &'static Assets,
    /// `None`: not signed in (no nav, no sign-out form).
    pub(crate) frame: Option<Frame>,
    /// The page's live stream (`/console/events?…`), opened by `console.js`.
    pub(crate) live: Option<String>,
    /// Whether the page draws charts (loads uPlot).
    pub(crate) charts: bool,
    /// This build's version.
    pub(crate) version: &'static str,
}

impl Chrome {
    /// The frame of a page shown without a session.
    pub(crate) fn anonymous() -> Chrome {
        Chrome {
            assets: &ASSETS,
            frame: None,
            live: None,
            charts: false,
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// A request of a signed-in operator: its live session (used now) and the session's secret.
/// Not signed in (no cookie, or a session that ended, idled out or whose operator was revoked)
/// → `303` to the sign-in page.
pub(crate) struct Signed {
    pub(crate) session: OperatorSession,
    secret: String,
}

impl Signed {
    pub(crate) fn operator(&self) -> &Operator {
        &self.session.operator
    }

    pub(crate) fn scope(&self) -> &OperatorScope {
        &self.session.operator.scope
    }

    /// The session's CSRF token (every form of its pages carries it).
    pub(crate) fn csrf(&self) -> String {
        csrf_token(&self.secret)
    }

    /// The hash of the session's secret (how a sign-out names it to the live streams).
    pub(crate) fn hash(&self) -> TokenHash {
        TokenHash::of(&self.secret)
    }

    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// The frame of a page of `section`.
    pub(crate) fn chrome(&self, section: Section) -> Chrome {
        Chrome {
            assets: &ASSETS,
            frame: Some(self.frame(section)),
            live: None,
            charts: false,
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    pub(crate) fn frame(&self, section: Section) -> Frame {
        Frame {
            operator: self.session.operator.name.clone(),
            csrf: self.csrf(),
            section,
        }
    }

    /// The page for a use case's refusal (or a template's failure), in this operator's frame.
    pub(crate) fn refuse(&self, e: impl Into<failure::Failed>) -> Response {
        failure::failed(&e.into(), Some(self.frame(Section::None)))
    }

    /// `None` when `fields` carry this session's CSRF token; otherwise the `403` page.
    pub(crate) fn csrf_refusal(&self, fields: &Fields) -> Option<Response> {
        (!csrf_matches(&self.secret, fields.get(CSRF_FIELD)))
            .then(|| failure::csrf_refused(Some(self.frame(Section::None))))
    }
}

impl FromRequestParts<Console> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Console) -> Result<Self, Response> {
        let Some(secret) = cookie(&parts.headers, SESSION_COOKIE) else {
            return Err(failure::to_sign_in(false, state.secure()));
        };
        match state.bus.console_session(&secret).await {
            Ok(session) => Ok(Signed { session, secret }),
            Err(BusError::Unauthenticated) => Err(failure::to_sign_in(true, state.secure())),
            Err(e) => Err(failure::refusal(&e, None)),
        }
    }
}

impl Console {
    /// Whether cookies are marked `Secure` (`console.secure_cookies`).
    pub(crate) fn secure(&self) -> bool {
        self.bus.settings().console.secure_cookies
    }
}

/// The client's address, as the accept loop put it into the request (`ConnectInfo`);
/// `0.0.0.0` for a request that did not come through it.
pub(crate) struct Peer(pub(crate) IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip()),
        ))
    }
}

/// The fields of a form POST (`application/x-www-form-urlencoded`), in order. A body that is not
/// such a form reads as no fields at all (so its CSRF check fails: `403`).
#[derive(Default)]
pub(crate) struct Fields(Vec<(String, String)>);

/// Prints the fields' names only: a posted form holds tokens, sign-in codes and CSRF tokens.
impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| format!("{k}=[redacted]")))
            .finish()
    }
}

impl Fields {
    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name`, trimmed, `None` when absent or blank.
    pub(crate) fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }
}

impl<S: Send + Sync> FromRequest<S> for Fields {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(
            match axum::Form::<Vec<(String, String)>>::from_request(req, state).await {
                Ok(axum::Form(fields)) => Fields(fields),
                Err(_) => Fields::default(),
            },
        )
    }
}

/// `t` rendered as an HTML page with `status`; a template that fails to render is a `500`.
pub(crate) fn html(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => {
            let mut r = (status, body).into_response();
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
        Err(e) => {
            tracing::error!(error = %e, "a console template failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render",
            )
                .into_response()
        }
    }
}

/// `Query<T>` answering a query string that does not fit with the console's HTML error page
/// (`400`), not axum's plain text.
pub(crate) struct PageQuery<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for PageQuery<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(PageQuery(v)),
            Err(rejection) => Err(failure::refusal(
                &BusError::invalid(format!(
                    "this address's query does not fit the page: {}",
                    rejection.body_text()
                )),
                None,
            )),
        }
    }
}
