//! The console's response headers, cookies and CSRF tokens.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, HeaderName, HeaderValue, REFERRER_POLICY,
    SET_COOKIE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The console's Content-Security-Policy: scripts, styles, images, fonts and connections from
/// the console's own origin only, no inline script or style, no framing, forms posting back to
/// the console.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                              img-src 'self' data:; connect-src 'self'; font-src 'self'; \
                              form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's `Referrer-Policy`: no `Referer` ever leaves the console's origin (its URLs
/// name teams, conversations and, on the sign-in page, a one-time code). Not `no-referrer`:
/// under it a browser sends a form POST with `Origin: null`, which the listener's `Origin`
/// check refuses, as it should (a sandboxed or `file:` document sends the same).
pub(crate) const REFERRER: &str = "same-origin";

/// The session cookie: the session's secret (64 hex digits).
pub(crate) const SESSION_COOKIE: &str = "crewbus_session";

/// The sign-in form's pre-session cookie: a random secret whose derived token the form carries
/// (double submit), so the sign-in POST is CSRF-checked too.
pub(crate) const SIGN_IN_COOKIE: &str = "crewbus_sign_in";

/// The form field every POST carries its CSRF token in.
pub(crate) const CSRF_FIELD: &str = "_csrf";

/// Adds the console's security headers to every response; a response that did not set its own
/// `Cache-Control` (static assets do) is `no-store`.
pub(crate) async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static(REFERRER));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(CACHE_CONTROL) {
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// The CSRF token of a secret (a session's, or the sign-in form's pre-session one):
/// hex(SHA-256(`"csrf:"` + secret)). Derived, never stored.
pub(crate) fn csrf_token(secret: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"csrf:");
    h.update(secret.as_bytes());
    hex::encode(h.finalize())
}

/// Whether `presented` (the form's `_csrf`) is the token of `secret`, compared in constant time.
pub(crate) fn csrf_matches(secret: &str, presented: Option<&str>) -> bool {
    let Some(presented) = presented else {
        return false;
    };
    let expected = csrf_token(secret);
    if presented.len() != expected.len() {
        return false;
    }
    presented
        .bytes()
        .zip(expected.bytes())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// The value of the cookie `name` of a request (the first one when it is sent more than once),
/// `None` when absent or empty.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

/// A `Set-Cookie` value: `name=value; HttpOnly; SameSite=Strict; Path=path` (`Secure` when
/// `secure`); `value` `None` removes the cookie (`Max-Age=0`).
pub(crate) fn set_cookie(name: &str, value: Option<&str>, path: &str, secure: bool) -> HeaderValue {
    let mut c = format!(
        "{name}={}; HttpOnly; SameSite=Strict; Path={path}",
        value.unwrap_or("")
    );
    if value.is_none() {
        c.push_str("; Max-Age=0");
    }
    if secure {
        c.push_str("; Secure");
    }
    // Names are constants and values hex digits: always a valid header value.
    HeaderValue::from_str(&c).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `303 See Other` to `location`, with `cookies` set.
pub(crate) fn see_other(location: &str, cookies: &[HeaderValue]) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(axum::http::header::LOCATION, v);
    }
    for c in cookies {
        r.headers_mut().append(SET_COOKIE, c.clone());
    }
    r
}

/// `Retry-After`.
pub(crate) const RETRY_AFTER: HeaderName = axum::http::header::RETRY_AFTER;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_token_is_the_contracts_derivation() {
        // hex(SHA-256("csrf:abc")), as `printf 'csrf:abc' | sha256sum` prints it.
        let t = csrf_token("abc");
        assert_eq!(t, hex::encode(Sha256::digest(b"csrf:abc")));
        assert!(csrf_matches("abc", Some(&t)));
        assert!(!csrf_matches("abd", Some(&t)));
        assert!(!csrf_matches("abc", Some("")));
        assert!(!csrf_matches("abc", None));
        assert!(!csrf_matches("abc", Some(&t[..63])));
    }

    #[test]
    fn cookies_are_read_by_name_and_written_strict() {
        let mut h = HeaderMap::new();
        h.append(
            COOKIE,
            HeaderValue::from_static("a=1; crewbus_session=s3cr3t"),
        );
        h.append(COOKIE, HeaderValue::from_static("crewbus_session=later"));
        assert_eq!(cookie(&h, SESSION_COOKIE).as_deref(), Some("s3cr3t"));
        assert_eq!(cookie(&h, "a").as_deref(), Some("1"));
        assert_eq!(cookie(&h, "b"), None);
        let set = set_cookie(SESSION_COOKIE, Some("v"), "/console", true);
        assert_eq!(
            set.to_str().unwrap(),
            "crewbus_session=v; HttpOnly; SameSite=Strict; Path=/console; Secure"
        );
        let gone = set_cookie(SESSION_COOKIE, None, "/console", false);
        assert_eq!(
            gone.to_str().unwrap(),
            "crewbus_session=; HttpOnly; SameSite=Strict; Path=/console; Max-Age=0"
        );
    }
}
