//! The tool profile of a request to `/mcp`: `?tools=NAME` in the URL or the `Crewbus-Tools: NAME`
//! header (for hosts whose configuration takes headers but keeps the URL fixed, and for
//! `crewbus mcp --tools`). Neither: [`Profile::Full`], `tools/list` exactly as it always was.
//!
//! A name that is not a profile is refused (`400 invalid`, naming the profiles) on every request,
//! rather than served as full: a typo in a host's configuration would otherwise silently put the
//! whole catalogue back into every model's context, and nobody would see why; refused, the host
//! fails to connect and says so. The URL and the header naming different profiles is refused
//! the same way. The profile shapes `tools/list`, and under core the answers holding message
//! bodies fence them in `structuredContent` too (`mcp/tools/`); every tool is callable under
//! any profile.

use axum::extract::{Query, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;

use crate::edge::error::ApiError;

/// Which tools `tools/list` shows, and how (`mcp/catalogue.rs`). Chosen per request by
/// `/mcp?tools=NAME` or the `Crewbus-Tools: NAME` header (`select`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// Every tool with its output schema: `tools/list` as it always was.
    #[default]
    Full,
    /// The agent loop's 12 tools, without output schemas, with shorter descriptions.
    Core,
}

impl Profile {
    /// The profile a name selects (`full`, `core`; exact, lower case), `None` for another.
    pub fn named(name: &str) -> Option<Profile> {
        match name {
            "full" => Some(Profile::Full),
            "core" => Some(Profile::Core),
            _ => None,
        }
    }

    /// The profile's name, as [`Profile::named`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Core => "core",
        }
    }
}

/// The query parameter naming the profile.
pub const QUERY: &str = "tools";

/// The header naming the profile (HTTP header names are case-insensitive).
pub const HEADER: &str = "crewbus-tools";

/// Reads the request's profile and puts it into its extensions for `tools/list`
/// (`CrewbusMcp::list_tools` reads it from the `http::request::Parts` rmcp hands it). An unknown
/// profile, or the URL and the header disagreeing: `400 invalid` with the API's JSON error.
pub(crate) async fn select(mut req: Request, next: Next) -> Response {
    match profile_of(&req) {
        Ok(profile) => {
            req.extensions_mut().insert(profile);
            next.run(req).await
        }
        Err(e) => ApiError(e).into_response(),
    }
}

/// The profile `req` names (see the module docs).
fn profile_of(req: &Request) -> Result<Profile, BusError> {
    let mut named: Vec<String> = Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map(|Query(pairs)| {
            pairs
                .into_iter()
                .filter(|(k, _)| k == QUERY)
                .map(|(_, v)| v)
                .collect()
        })
        .unwrap_or_default();
    for value in req.headers().get_all(HEADER) {
        let value = value
            .to_str()
            .map_err(|_| BusError::invalid(format!("the {HEADER} header is not visible ASCII")))?;
        named.push(value.trim().to_owned());
    }
    let mut profile = None;
    for name in &named {
        let p = Profile::named(name).ok_or_else(|| {
            BusError::invalid(format!(
                "unknown tool profile {name:?} (in ?{QUERY}= or the Crewbus-Tools header): \
                 use \"core\" or \"full\""
            ))
        })?;
        if profile.is_some_and(|q| q != p) {
            return Err(BusError::invalid(format!(
                "the request names two tool profiles ({}); name one, in ?{QUERY}= or the \
                 Crewbus-Tools header",
                named.join(", ")
            )));
        }
        profile = Some(p);
    }
    Ok(profile.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(uri: &str, header: Option<&str>) -> Result<Profile, BusError> {
        let mut req = axum::http::Request::builder().uri(uri);
        if let Some(h) = header {
            req = req.header("Crewbus-Tools", h);
        }
        profile_of(&req.body(axum::body::Body::empty()).unwrap())
    }

    #[test]
    fn the_url_or_the_header_names_the_profile_and_full_is_the_default() {
        assert_eq!(of("/mcp", None).unwrap(), Profile::Full);
        assert_eq!(of("/mcp?tools=core", None).unwrap(), Profile::Core);
        assert_eq!(of("/mcp?x=1&tools=full", None).unwrap(), Profile::Full);
        assert_eq!(of("/mcp", Some("core")).unwrap(), Profile::Core);
        assert_eq!(
            of("/mcp?tools=core", Some(" core ")).unwrap(),
            Profile::Core
        );
    }

    #[test]
    fn an_unknown_profile_or_two_different_ones_are_invalid() {
        for (uri, header) in [
            ("/mcp?tools=Core", None),
            ("/mcp?tools=", None),
            ("/mcp", Some("lean")),
            ("/mcp?tools=core", Some("full")),
            ("/mcp?tools=core&tools=full", None),
        ] {
            let e = of(uri, header).unwrap_err();
            assert_eq!(e.code(), "invalid", "{uri} {header:?}");
        }
    }
}
