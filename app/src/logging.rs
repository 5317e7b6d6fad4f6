//! Log set-up for the binary: `tracing` to stderr, as text or as JSON (one object per line),
//! filtered by directives; and [`RepeatedWarning`], which keeps a warning that a client can
//! cause many times a second (a connection over the limit, a refused sign-in) to one line per
//! period, with a count.

use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogConfig;

/// Installs the global subscriber once, writing `config.format` (`json`: one JSON object per
/// line with `timestamp`, `level`, `target` and `fields`; anything else: text) to stderr. A bad
/// directive falls back to `info` with a warning.
pub fn init(config: &LogConfig) {
    // sqlx logs every server notice, async-nats every connect and rmcp three lines per MCP
    // request at info; keep them at warn unless asked for.
    let mut level = config.level.clone();
    for noisy in ["sqlx", "async_nats", "rmcp"] {
        if !level.contains(noisy) {
            level = format!("{noisy}=warn,{level}");
        }
    }
    let (filter, bad) = match level.parse::<Targets>() {
        Ok(t) => (t, false),
        Err(_) => ("info".parse::<Targets>().expect("`info` parses"), true),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::registry()
        .with(format_layer(&config.format, std::io::stderr, ansi))
        .with(filter)
        .try_init();
    if bad {
        tracing::warn!("log.level is not a valid directive list; using `info`");
    }
}

/// The formatting layer for `format` (`json` selects the JSON formatter, anything else text)
/// writing to `writer`; `ansi` colours text output (never JSON).
fn format_layer<S, W>(format: &str, writer: W, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(true);
    if format == "json" {
        layer.json().with_ansi(false).boxed()
    } else {
        layer.with_ansi(ansi).boxed()
    }
}

/// Rate-limits a warning to one line per period, with a count (shared with the adapters: its
/// home is the domain crate).
pub(crate) use crewbus_domain::RepeatedWarning;

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer collecting everything written into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn emit(format: &str) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber =
            tracing_subscriber::registry().with(format_layer(format, move || writer.clone(), true));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(worker = "relay", "stopped");
        });
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn json_format_writes_one_json_object_per_line() {
        let text = emit("json");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["fields"]["message"], "stopped");
        assert_eq!(v["fields"]["worker"], "relay");
        assert!(v["target"].as_str().unwrap().starts_with("crewbus"));
    }

    #[test]
    fn text_format_is_not_json() {
        let text = emit("text");
        assert!(
            text.contains("stopped") && text.contains("worker"),
            "{text}"
        );
        assert!(serde_json::from_str::<serde_json::Value>(text.trim()).is_err());
    }
}
