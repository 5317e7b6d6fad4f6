//! The listener-wide `Host` and `Origin` check, in front of every route (the API, the MCP
//! endpoint, the console): the protection against DNS rebinding and cross-site requests.
//!
//! - More than one `Host` header, or none on an HTTP/1.1 request → `400 invalid` (RFC 9112
//!   §3.2: a server MUST answer 400 to either). A request in absolute form
//!   (`GET http://name/path`) must have an allowed authority too (`403`).
//! - A `Host` that is not loopback (`localhost`, `127.0.0.1`, `[::1]`, any port) nor in
//!   `[http] allowed_hosts` (`host`: any port; `host:port`: that port) → `403 forbidden`.
//! - An `Origin` (sent by browsers) that is not a loopback origin (`http://localhost`,
//!   `http://127.0.0.1`, `http://[::1]`, any port) nor in `[http] allowed_origins` → `403
//!   forbidden`. A request without `Origin` (agents, MCP hosts that are not browsers) passes.
//!
//! Refusals are the API's JSON errors; nothing of the request is read beyond its head.

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::{HeaderMap, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use crewbus_domain::BusError;

use super::error::ApiError;
use crate::config::AllowList;

/// The `Host` names always accepted, on any port (`[::1]` is compared without brackets).
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The browser origins always accepted, on any port.
pub const LOOPBACK_ORIGINS: [&str; 3] =
    ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// The middleware: refuses a request whose `Host` or `Origin` is not allowed by `allow` (see the
/// module docs), else passes it on.
pub(crate) async fn check(State(allow): State<AllowList>, req: Request, next: Next) -> Response {
    // A request in absolute form (`GET http://name/path`) is answered for the URI's authority
    // (RFC 9112 §3.2.2): it must be allowed as a Host is.
    if let Some(authority) = req.uri().authority()
        && !host_allowed(&allow, authority.as_str())
    {
        return ApiError(BusError::forbidden(
            "this request's authority is not allowed (add it to [http] allowed_hosts)",
        ))
        .into_response();
    }
    match verdict(&allow, req.version(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => ApiError(e).into_response(),
    }
}

/// Whether a request head with `headers` passes `allow`. Errors: as the module docs say.
pub(crate) fn verdict(
    allow: &AllowList,
    version: Version,
    headers: &HeaderMap,
) -> Result<(), BusError> {
    let mut hosts = headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => {
            return Err(BusError::invalid("more than one Host header"));
        }
        (None, _) if version >= Version::HTTP_11 => {
            return Err(BusError::invalid("an HTTP/1.1 request needs a Host header"));
        }
        (None, _) => {}
        (Some(host), None) => {
            let host = host
                .to_str()
                .map_err(|_| BusError::forbidden("this Host is not allowed"))?;
            if !host_allowed(allow, host) {
                return Err(BusError::forbidden(
                    "this Host is not allowed (add it to [http] allowed_hosts)",
                ));
            }
        }
    }
    let mut origins = headers.get_all(ORIGIN).iter();
    match (origins.next(), origins.next()) {
        (Some(_), Some(_)) => Err(BusError::invalid("more than one Origin header")),
        (Some(origin), None) => {
            let origin = origin
                .to_str()
                .map_err(|_| BusError::forbidden("this Origin is not allowed"))?;
            if origin_allowed(allow, origin) {
                Ok(())
            } else {
                Err(BusError::forbidden(
                    "this Origin is not allowed (add it to [http] allowed_origins)",
                ))
            }
        }
        (None, _) => Ok(()),
    }
}

/// `host[:port]` split, the host lower-cased and without IPv6 brackets; `None` when it does not
/// parse as an authority without userinfo.
fn split_host(value: &str) -> Option<(String, Option<u16>)> {
    let authority: axum::http::uri::Authority = value.trim().parse().ok()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    Some((host, authority.port_u16()))
}

/// Whether the `Host` value `value` is loopback or configured.
pub(crate) fn host_allowed(allow: &AllowList, value: &str) -> bool {
    let Some((host, port)) = split_host(value) else {
        return false;
    };
    if LOOPBACK_HOSTS.contains(&host.as_str()) {
        return true;
    }
    allow.allowed_hosts.iter().any(|entry| {
        // An entry is `host` (any port) or `host:port`; a bare IPv6 address is a host.
        let entry = entry.trim();
        if entry.parse::<std::net::Ipv6Addr>().is_ok() {
            return entry.eq_ignore_ascii_case(&host);
        }
        match split_host(entry) {
            Some((h, None)) => h == host,
            Some((h, Some(p))) => h == host && port == Some(p),
            None => false,
        }
    })
}

/// `scheme://host[:port]` split: scheme and host lower-cased, the port the scheme's default when
/// none is written (80 for http, 443 for https). `None` for anything that is not such an origin.
fn split_origin(value: &str) -> Option<(String, String, Option<u16>)> {
    let (scheme, rest) = value.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') || rest.contains('#') {
        return None;
    }
    let (host, port) = split_host(rest)?;
    let port = port.or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    });
    Some((scheme, host, port))
}

/// Whether the `Origin` value `value` is a loopback origin or configured.
pub(crate) fn origin_allowed(allow: &AllowList, value: &str) -> bool {
    if value.trim() == "null" {
        return allow.allowed_origins.iter().any(|o| o == "null");
    }
    let Some(origin) = split_origin(value) else {
        return false;
    };
    LOOPBACK_ORIGINS
        .iter()
        .map(|o| (*o).to_owned())
        .chain(allow.allowed_origins.iter().cloned())
        .any(|entry| match entry.strip_suffix(":*") {
            Some(base) => {
                split_origin(base).is_some_and(|(s, h, _)| s == origin.0 && h == origin.1)
            }
            None => split_origin(&entry).is_some_and(|e| e == origin),
        })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn allow() -> AllowList {
        AllowList {
            allowed_hosts: vec!["bus.example.com".into(), "other.example:8443".into()],
            allowed_origins: vec![
                "https://console.example.com:443".into(),
                "http://dev.example:*".into(),
            ],
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn hosts_are_loopback_or_configured() {
        let a = allow();
        for ok in [
            "127.0.0.1:7700",
            "localhost",
            "LOCALHOST:1",
            "[::1]:7700",
            "bus.example.com",
            "bus.example.com:443",
            "other.example:8443",
        ] {
            assert!(host_allowed(&a, ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "other.example:8444",
            "other.example",
            "127.0.0.2",
            "user@127.0.0.1",
            "",
            "127.0.0.1.evil.example",
        ] {
            assert!(!host_allowed(&a, bad), "{bad}");
        }
    }

    #[test]
    fn origins_are_loopback_or_configured_with_default_ports() {
        let a = allow();
        for ok in [
            "http://127.0.0.1:7700",
            "http://localhost",
            "http://[::1]:9",
            "https://console.example.com",
            "https://console.example.com:443",
            "http://dev.example:3000",
        ] {
            assert!(origin_allowed(&a, ok), "{ok}");
        }
        for bad in [
            "https://127.0.0.1:7700",
            "http://evil.example",
            "https://console.example.com:8443",
            "null",
            "http://127.0.0.1:7700/path",
            "javascript:alert(1)",
        ] {
            assert!(!origin_allowed(&a, bad), "{bad}");
        }
        let with_null = AllowList {
            allowed_origins: vec!["null".into()],
            ..AllowList::default()
        };
        assert!(origin_allowed(&with_null, "null"));
    }

    #[test]
    fn two_hosts_or_none_are_bad_requests_and_a_foreign_one_forbidden() {
        let a = AllowList::default();
        let two = headers(&[("host", "127.0.0.1:1"), ("host", "evil.example")]);
        assert!(matches!(
            verdict(&a, Version::HTTP_11, &two),
            Err(BusError::Invalid { .. })
        ));
        // The loopback name first does not make the second one harmless.
        let two = headers(&[("host", "127.0.0.1:1"), ("host", "127.0.0.1:1")]);
        assert!(matches!(
            verdict(&a, Version::HTTP_11, &two),
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            verdict(&a, Version::HTTP_11, &HeaderMap::new()),
            Err(BusError::Invalid { .. })
        ));
        assert!(verdict(&a, Version::HTTP_10, &HeaderMap::new()).is_ok());
        assert!(matches!(
            verdict(&a, Version::HTTP_11, &headers(&[("host", "evil.example")])),
            Err(BusError::Forbidden { .. })
        ));
        let cross = headers(&[("host", "127.0.0.1:1"), ("origin", "http://evil.example")]);
        assert!(matches!(
            verdict(&a, Version::HTTP_11, &cross),
            Err(BusError::Forbidden { .. })
        ));
        let same = headers(&[("host", "127.0.0.1:1"), ("origin", "http://127.0.0.1:1")]);
        assert!(verdict(&a, Version::HTTP_11, &same).is_ok());
    }
}
