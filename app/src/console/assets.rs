//! The console's static files, embedded in the binary and served under `/console/static/` with
//! long-lived caching: every page links them with `?v=` and the first 16 hex digits of their
//! SHA-256, so a new build's files are new URLs.
//!
//! Vendored files live in `app/static/console/vendor/<package>/` with their licence, a
//! `SHA256SUMS` file (`sha256sum -c` reads it; a unit test checks the embedded bytes against it)
//! and a `VENDORED.md` saying where they came from.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file.
struct Asset {
    /// Its name under `/console/static/`.
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const CONSOLE_JS: &[u8] = include_bytes!("../../static/console/console.js");
const CONSOLE_CSS: &[u8] = include_bytes!("../../static/console/console.css");
const ICON: &[u8] = include_bytes!("../../static/console/icon.svg");
const UPLOT_JS: &[u8] = include_bytes!("../../static/console/vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &[u8] = include_bytes!("../../static/console/vendor/uplot/uPlot.min.css");
const UPLOT_LICENSE: &[u8] = include_bytes!("../../static/console/vendor/uplot/LICENSE");

const FILES: [Asset; 6] = [
    Asset {
        name: "console.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: CONSOLE_JS,
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        bytes: CONSOLE_CSS,
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        bytes: ICON,
    },
    Asset {
        name: "uplot.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: UPLOT_JS,
    },
    Asset {
        name: "uplot.min.css",
        content_type: "text/css; charset=utf-8",
        bytes: UPLOT_CSS,
    },
    Asset {
        name: "uplot-LICENSE.txt",
        content_type: "text/plain; charset=utf-8",
        bytes: UPLOT_LICENSE,
    },
];

/// The URLs pages link the static files with.
#[derive(Debug)]
pub(crate) struct Assets {
    pub(crate) js: String,
    pub(crate) css: String,
    pub(crate) icon: String,
    pub(crate) uplot_js: String,
    pub(crate) uplot_css: String,
    pub(crate) uplot_license: String,
}

/// The URLs, computed once.
pub(crate) static ASSETS: LazyLock<Assets> = LazyLock::new(|| Assets {
    js: url("console.js"),
    css: url("console.css"),
    icon: url("icon.svg"),
    uplot_js: url("uplot.min.js"),
    uplot_css: url("uplot.min.css"),
    uplot_license: url("uplot-LICENSE.txt"),
});

/// `/console/static/NAME?v=<16 hex digits of its SHA-256>`.
fn url(name: &str) -> String {
    let asset = FILES
        .iter()
        .find(|a| a.name == name)
        .expect("an embedded asset");
    let digest = hex::encode(Sha256::digest(asset.bytes));
    format!("/console/static/{name}?v={}", &digest[..16])
}

/// `GET /console/static/{file}`: the file with its content type, cached for a year (`immutable`:
/// its URL changes with its contents).
pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    match FILES.iter().find(|a| a.name == file) {
        Some(a) => {
            let mut r = a.bytes.into_response();
            let h = r.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
            h.insert(
                CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            );
            r
        }
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vendored files embedded are the ones their `SHA256SUMS` names.
    #[test]
    fn vendored_files_match_their_checksums() {
        let sums = include_str!("../../static/console/vendor/uplot/SHA256SUMS");
        let embedded = [
            ("uPlot.iife.min.js", UPLOT_JS),
            ("uPlot.min.css", UPLOT_CSS),
            ("LICENSE", UPLOT_LICENSE),
        ];
        let mut checked = 0;
        for line in sums.lines().filter(|l| !l.trim().is_empty()) {
            let (sum, name) = line.split_once("  ").expect("`<sha256>  <file>` lines");
            let (_, bytes) = embedded
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("SHA256SUMS names {name}, which is not embedded"));
            assert_eq!(hex::encode(Sha256::digest(bytes)), sum, "{name}");
            checked += 1;
        }
        assert_eq!(
            checked,
            embedded.len(),
            "every vendored file has a checksum"
        );
    }

    #[test]
    fn urls_carry_a_content_hash() {
        assert!(ASSETS.js.starts_with("/console/static/console.js?v="));
        assert_eq!(ASSETS.js.len(), "/console/static/console.js?v=".len() + 16);
    }
}
