//! The console tests' browser: HTTP with a cookie jar, forms posted as a browser posts them.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};

use crate::common::TestApp;

/// A browser without JavaScript: a cookie jar (path-blind: every cookie is sent everywhere),
/// redirects not followed.
pub struct Browser {
    pub base: String,
    pub http: reqwest::Client,
    pub cookies: HashMap<String, String>,
}

/// One answer, its body read.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The value of the first `name="…" value="…"` input (attributes in that order, as the
    /// console's templates write them).
    pub fn input(&self, name: &str) -> String {
        let re = regex::Regex::new(&format!(r#"name="{name}"[^>]*?value="([^"]*)""#)).unwrap();
        re.captures(&self.body)
            .unwrap_or_else(|| panic!("no input {name} in:\n{}", self.body))[1]
            .to_owned()
    }

    /// The `data-events` URL of the page's `<main>`, HTML entities undone.
    pub fn events_url(&self) -> String {
        let re = regex::Regex::new(r#"<main id="main" data-events="([^"]*)""#).unwrap();
        re.captures(&self.body).expect("a live page")[1].replace("&#38;", "&")
    }
}

impl Browser {
    pub fn new(base: &str) -> Browser {
        Browser {
            base: base.to_owned(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    pub fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn keep_cookies(&mut self, headers: &HeaderMap) {
        for set in headers.get_all(SET_COOKIE) {
            let set = set.to_str().unwrap();
            let (pair, attributes) = set.split_once(';').unwrap_or((set, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if attributes.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    pub async fn answer(&mut self, r: reqwest::Response) -> Page {
        let status = r.status();
        let headers = r.headers().clone();
        self.keep_cookies(&headers);
        Page {
            status,
            headers,
            body: r.text().await.unwrap(),
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        self.answer(r).await
    }

    /// A form POST, with the console's own `Origin` (as a browser sends it).
    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("origin", self.base.clone())
            .form(form)
            .send()
            .await
            .unwrap();
        self.answer(r).await
    }

    /// Signs in with `code` or `token` through the form; the POST's answer.
    pub async fn sign_in(&mut self, code: Option<&str>, token: Option<&str>) -> Page {
        let form = self.get("/console/sign-in").await;
        assert_eq!(form.status, StatusCode::OK);
        let csrf = form.input("_csrf");
        self.post(
            "/console/sign-in",
            &[
                ("_csrf", &csrf),
                ("code", code.unwrap_or("")),
                ("token", token.unwrap_or("")),
            ],
        )
        .await
    }

    /// GETs `path` until `want` holds for the page (10 s at most).
    pub async fn get_until(
        &mut self,
        path: &str,
        what: &str,
        want: impl Fn(&Page) -> bool,
    ) -> Page {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let page = self.get(path).await;
            if want(&page) {
                return page;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}:\n{}",
                page.body
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The session's CSRF token, as the sign-out form of any page carries it.
    pub async fn csrf(&mut self) -> String {
        self.get("/console").await.input("_csrf")
    }
}

pub async fn code(app: &TestApp) -> String {
    let dev = app.bus.dev_operator().await.unwrap();
    app.bus.issue_sign_in_code(&dev).await.unwrap().code
}

pub async fn signed_in(app: &TestApp) -> Browser {
    let mut b = Browser::new(&app.server.url());
    let code = code(app).await;
    let r = b.sign_in(Some(&code), None).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    b
}
