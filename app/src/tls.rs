//! The process's TLS crypto provider for rmcp's HTTP client.
//!
//! rmcp's Streamable HTTP client (reqwest 0.13, built with rustls and no provider of its own)
//! uses the process-wide default rustls provider, and building its client without one panics.
//! [`install_crypto_provider`] installs ring, the provider the app's own reqwest already uses,
//! so the `https://` URLs of `crewbus mcp` and `crewbus-load --transport mcp` work.

/// Installs ring as the process's default rustls provider, unless one is installed already.
/// Call it before building an rmcp HTTP client; calling it again is harmless.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
