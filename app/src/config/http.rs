//! The `[http]` section: which `Host` and `Origin` values the serve listener accepts beyond
//! loopback, on every route (the API, the MCP endpoint, the console). `[mcp]`, where the MCP
//! endpoint's list lived before the listener had one, is read into the same list.

use crewbus_domain::{BusError, BusResult};
use serde::Deserialize;

/// The listener's protection against DNS rebinding and cross-site requests (`[http]`). Both
/// lists EXTEND the loopback defaults, which always stay: a request whose `Host` is not allowed,
/// or that carries an `Origin` that is not allowed, is refused with `403` before anything else
/// is read (a request without `Origin`, as agents and MCP hosts that are not browsers send,
/// passes the Origin check); a request with more than one `Host` header is `400`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AllowList {
    /// More `Host` values to accept, as `host` (any port) or `host:port`, e.g.
    /// `["bus.example.com"]`. The loopback names `localhost`, `127.0.0.1` and `::1` (`[::1]`)
    /// are always accepted, on any port. Default empty.
    pub allowed_hosts: Vec<String>,
    /// More browser origins to accept, as `scheme://host:port` (that port only), or
    /// `scheme://host:*` (any port), e.g. `["https://console.example.com:443"]`;
    /// `"null"` accepts the browser's `Origin: null`. `http://localhost`, `http://127.0.0.1` and
    /// `http://[::1]` on any port are always accepted. Default empty.
    pub allowed_origins: Vec<String>,
}

impl AllowList {
    /// This list with `other`'s entries added (each once).
    pub fn merged(&self, other: &AllowList) -> AllowList {
        let mut out = self.clone();
        for h in &other.allowed_hosts {
            if !out.allowed_hosts.contains(h) {
                out.allowed_hosts.push(h.clone());
            }
        }
        for o in &other.allowed_origins {
            if !out.allowed_origins.contains(o) {
                out.allowed_origins.push(o.clone());
            }
        }
        out
    }

    /// Checks every entry. Errors: a host that is not `host` or `host:port`, an origin that is
    /// not `scheme://host[:port|:*]` or `null` → `Invalid` naming it, under `section`.
    pub(super) fn validate(&self, section: &str) -> BusResult<()> {
        for host in &self.allowed_hosts {
            if host.trim().is_empty()
                || host
                    .parse::<axum::http::uri::Authority>()
                    .is_err_and(|_| host.parse::<std::net::Ipv6Addr>().is_err())
            {
                return Err(BusError::invalid(format!(
                    "{section}.allowed_hosts: {host:?} is not a host or host:port"
                )));
            }
        }
        for origin in &self.allowed_origins {
            let base = origin.strip_suffix(":*").unwrap_or(origin);
            let ok = origin == "null"
                || base.parse::<axum::http::Uri>().is_ok_and(|u| {
                    u.scheme().is_some()
                        && u.authority().is_some()
                        && u.path() == "/"
                        && u.query().is_none()
                });
            if !ok {
                return Err(BusError::invalid(format!(
                    "{section}.allowed_origins: {origin:?} is not an origin (scheme://host, scheme://host:port or scheme://host:*)"
                )));
            }
        }
        Ok(())
    }
}
