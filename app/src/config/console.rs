//! The `[console]` section: the operator console at `/console` on the serve listener.

use serde::Deserialize;

/// The console (`[console]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Whether `/console` is served. Default true (it answers only signed-in operators; a
    /// listener bound beyond loopback needs `[http] allowed_hosts` for it anyway).
    pub enabled: bool,
    /// A console session unused this long ends, in seconds (`CREWBUS_CONSOLE__SESSION_IDLE_S`).
    /// Default 43 200 (12 h); 60 to 2 592 000 (30 days).
    pub session_idle_s: u64,
    /// Mark the session cookie `Secure` (set it when crewbus is reached over TLS, e.g. behind a
    /// TLS-terminating proxy). Default false (the browser would drop a `Secure` cookie over
    /// plain `http://127.0.0.1`).
    pub secure_cookies: bool,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            session_idle_s: 43_200,
            secure_cookies: false,
        }
    }
}

impl ConsoleConfig {
    /// The range `session_idle_s` accepts, in seconds.
    pub const SESSION_IDLE_S: std::ops::RangeInclusive<u64> = 60..=2_592_000;
}
