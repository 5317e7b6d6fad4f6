//! Log set-up for the binary: `tracing` to stderr, text or JSON-ish, filtered by directives.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogConfig;

/// Installs the global subscriber once. A bad directive falls back to `info` with a warning.
pub fn init(config: &LogConfig) {
    // sqlx logs every server notice and async-nats every connect at info; keep them at warn
    // unless asked for.
    let mut level = config.level.clone();
    for noisy in ["sqlx", "async_nats"] {
        if !level.contains(noisy) {
            level = format!("{noisy}=warn,{level}");
        }
    }
    let (filter, bad) = match level.parse::<Targets>() {
        Ok(t) => (t, false),
        Err(_) => ("info".parse::<Targets>().expect("`info` parses"), true),
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(filter)
        .try_init();
    if bad {
        tracing::warn!("log.level is not a valid directive list; using `info`");
    }
}
