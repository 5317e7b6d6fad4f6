//! The OpenAPI document, generated from the handlers and views ([`ApiDoc`]), with the limits
//! that come from the server's configuration filled in when it is served ([`document`]).

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Object, Schema};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::watch::{WatchNewsView, WatchRequest, WatchView};
use crate::edge::error::ErrorBody;
use crate::edge::leases::{
    AcquireLease, AcquireView, CheckLease, CheckView, LeaseEndView, LeaseEventView,
    LeaseHistoryView, LeaseModeView, LeaseView, LeasesView, RenewLease,
};
use crate::edge::views::*;
use crate::usecases::bus::BusSettings;
use crate::usecases::health::HealthReport;

/// The crewbus HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "crewbus",
        description = "The durable message bus for teams of AI agents. Authenticate with \
            `Authorization: Bearer <agent token>` (`cbt_…`); the admin API (`/v1/admin/…`, tag \
            `admin`) with `Authorization: Bearer <operator token>` (`cbo_…`, from `crewbus \
            operator add`): each refuses the other's token (401). Errors are `{code, message}`."
    ),
    tags(
        (name = "leases", description = "Fenced, expiring claims on path patterns: take one \
            (exclusive or shared, optionally waiting for conflicts to end), renew, release, list \
            the team's, and check a path with a fencing token (a stale token is refused)."),
        (name = "search", description = "Full-text search over the bodies and titles of the \
            caller's conversations, ranked, paged, the matched words marked."),
        (name = "admin", description = "What the people who run the agents see and do: teams, \
            agents with their activity, conversations with every recipient's delivery state, \
            runs, push registrations with their attempts logs, storage; add and revoke agents, \
            post as the team's human member, un-park. Operator token (security scheme \
            `operator`); anything of a team outside the operator's scope is 404.")
    ),
    paths(
        super::conversations::create,
        super::conversations::list,
        super::conversations::get,
        super::conversations::send,
        super::conversations::history,
        super::messages::receipts,
        super::messages::acknowledge,
        super::inbox::fetch,
        super::inbox::confirm,
        super::inbox::status,
        super::watch::watch,
        super::leases::acquire,
        super::leases::list,
        super::leases::get,
        super::leases::renew,
        super::leases::release,
        super::leases::check,
        super::ops::health,
        super::ops::metrics,
    ),
    components(schemas(
        ErrorBody, CreateConversation, ConversationView, SendMessage, MessageView, SentView,
        HistoryItemView, HistoryView, FetchRequest, DeliveryView, FetchView, ConfirmRequest,
        ConfirmItemView, ConfirmView, AcknowledgeRequest, ReceiptView, InboxStatusView,
        HealthReport, MemberKind, LeaseView, LeaseModeView, LeaseEndView, AcquireLease,
        AcquireView, RenewLease, LeasesView, LeaseEventView, LeaseHistoryView, CheckLease,
        CheckView, WatchRequest, WatchNewsView, WatchView
    )),
    modifiers(&BearerAuth, &Operations, &AdminApi, &RequestDeadline)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An agent's token (`cbt_…`)."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "operator",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An operator's token (`cbo_…`, printed once by `crewbus operator add`): \
                         the admin API only.",
                    ))
                    .build(),
            ),
        );
    }
}

/// The agent operations declared once (`crate::edge::operations`).
struct Operations;

impl Modify for Operations {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        super::operations::document(openapi);
    }
}

/// The admin API's operations and views (`super::admin`), in the same document.
struct AdminApi;

impl Modify for AdminApi {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        openapi.merge(super::admin::AdminDoc::openapi());
    }
}

/// Every operation but `/health` may answer `503` (`unavailable`, or `timeout` when its stores
/// did not answer within `bus.request_timeout_ms`, see `super::request_deadline`): declared on
/// each operation that does not state its own 503 already.
struct RequestDeadline;

impl Modify for RequestDeadline {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        for (path, item) in openapi.paths.paths.iter_mut() {
            if path == "/health" {
                continue;
            }
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                op.responses
                    .responses
                    .entry("503".to_owned())
                    .or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(
                                "a store is unavailable (`unavailable`: nothing was done), or \
                                 did not answer within `bus.request_timeout_ms` (`timeout`: a \
                                 write may still take effect); retry a read as it is, and look \
                                 before retrying a write that has no request_id",
                            )
                            .content(
                                "application/json",
                                ContentBuilder::new()
                                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                                    .build(),
                            )
                            .build()
                            .into()
                    });
            }
        }
    }
}

/// The document `GET /openapi.json` serves: [`ApiDoc`] with the configured limits of this
/// server as the `maximum` of `FetchRequest`'s `limit` (`bus.max_fetch`), `wait_ms`
/// (`bus.max_wait_ms`, in ms) and `max_bytes` (`bus.max_fetch_bytes`, in bytes), and of the
/// lease routes' waits and TTLs, so a client or a test generator sees the bounds it is held to.
/// (`WatchRequest`'s `wait_ms` has none: the watch clamps it to `bus.max_wait_ms`.)
pub fn document(settings: &BusSettings) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let fetch = doc
        .components
        .as_mut()
        .and_then(|c| c.schemas.get_mut("FetchRequest"));
    if let Some(RefOr::T(Schema::Object(fetch))) = fetch {
        let max_wait_ms = usize::try_from(settings.max_wait.as_millis()).unwrap_or(usize::MAX);
        set_maximum(fetch, "limit", settings.max_fetch);
        set_maximum(fetch, "wait_ms", max_wait_ms);
        set_maximum(fetch, "max_bytes", settings.max_fetch_bytes);
    }
    // The lease routes' bounds come from configuration too.
    let max_wait_ms = usize::try_from(settings.max_wait.as_millis()).unwrap_or(usize::MAX);
    let max_ttl_ms = usize::try_from(settings.lease_max_ttl.as_millis()).unwrap_or(usize::MAX);
    for (name, fields) in [
        (
            "AcquireLease",
            &[("wait_ms", max_wait_ms), ("ttl_ms", max_ttl_ms)][..],
        ),
        ("RenewLease", &[("ttl_ms", max_ttl_ms)][..]),
    ] {
        let schema = doc
            .components
            .as_mut()
            .and_then(|c| c.schemas.get_mut(name));
        if let Some(RefOr::T(Schema::Object(object))) = schema {
            for (field, maximum) in fields {
                set_maximum(object, field, *maximum);
            }
        }
    }
    doc
}

/// Sets the `maximum` of the integer property `name` (left alone when it is not an inline
/// object schema, which the tests would catch).
fn set_maximum(object: &mut Object, name: &str, maximum: usize) {
    if let Some(RefOr::T(Schema::Object(p))) = object.properties.get_mut(name) {
        p.maximum = Some(utoipa::Number::UInt(maximum));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use crewbus_domain::{MAX_NAME_LEN, MAX_PAGE, MAX_REQUEST_ID_LEN, RunOutcome};
    use serde_json::Value;

    use super::*;

    fn served(settings: &BusSettings) -> Value {
        serde_json::to_value(document(settings)).unwrap()
    }

    fn default_doc() -> Value {
        served(&BusSettings::default())
    }

    /// Every operation of the document: (method, path, operation).
    fn operations(doc: &Value) -> Vec<(String, String, Value)> {
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push((method.clone(), path.clone(), op.clone()));
            }
        }
        ops
    }

    fn operation(doc: &Value, method: &str, path: &str) -> Value {
        doc["paths"][path][method].clone()
    }

    fn component(doc: &Value, name: &str) -> Value {
        doc["components"]["schemas"][name].clone()
    }

    #[test]
    fn every_operation_has_its_own_operation_id() {
        let doc = default_doc();
        let mut seen = HashSet::new();
        for (method, path, op) in operations(&doc) {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}"));
            assert!(
                seen.insert(id.to_owned()),
                "operationId {id} twice ({method} {path})"
            );
        }
        // 30 of the agents' API and operations, 16 of the admin API.
        assert_eq!(seen.len(), 46);
    }

    #[test]
    fn path_parameters_are_in_the_path_and_paging_in_the_query() {
        let doc = default_doc();
        for (method, path, op) in operations(&doc) {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap();
                let templated = path.contains(&format!("{{{name}}}"));
                assert_eq!(p["in"] == "path", templated, "{method} {path}: {p}");
            }
        }
        for (path, names) in [
            ("/v1/conversations/{id}/messages", ["after_seq", "limit"]),
            ("/v1/runs/{id}/records", ["from_seq", "limit"]),
            (
                "/v1/admin/teams/{team}/conversations/{conversation}/messages",
                ["after_seq", "limit"],
            ),
            (
                "/v1/admin/teams/{team}/runs/{run}/records",
                ["from_seq", "limit"],
            ),
            ("/v1/admin/teams/{team}/runs", ["before", "limit"]),
        ] {
            let params = operation(&doc, "get", path)["parameters"].clone();
            for name in names {
                let p = params
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["name"] == name)
                    .unwrap_or_else(|| panic!("{path}: no {name}"))
                    .clone();
                assert_eq!(p["in"], "query", "{p}");
                assert_eq!(p["required"], false, "{p}");
                if name == "limit" {
                    assert_eq!(p["schema"]["minimum"], 1, "{p}");
                    assert_eq!(p["schema"]["maximum"], MAX_PAGE, "{p}");
                }
            }
        }
    }

    #[test]
    fn every_authenticated_operation_declares_401_and_every_body_400() {
        let doc = default_doc();
        let mut authenticated = 0;
        for (method, path, op) in operations(&doc) {
            let responses = op["responses"].as_object().unwrap();
            if op.get("security").is_some() {
                authenticated += 1;
                assert!(responses.contains_key("401"), "{method} {path}");
            }
            if op.get("requestBody").is_some() {
                assert!(responses.contains_key("400"), "{method} {path}");
            }
        }
        // Every operation but /health and /metrics.
        assert_eq!(authenticated, 44);
    }

    #[test]
    fn every_operation_but_health_declares_503_with_the_error_body() {
        let doc = default_doc();
        let mut declared = 0;
        for (method, path, op) in operations(&doc) {
            if path == "/health" {
                continue;
            }
            let answer = &op["responses"]["503"];
            assert!(
                answer["content"]["application/json"]["schema"]["$ref"]
                    .as_str()
                    .is_some_and(|r| r.ends_with("/ErrorBody")),
                "{method} {path}: {answer}"
            );
            declared += 1;
        }
        assert_eq!(declared, 45);
    }

    #[test]
    fn admin_operations_take_the_operator_scheme_and_the_others_the_agents() {
        let doc = default_doc();
        let schemes = &doc["components"]["securitySchemes"];
        for name in ["bearer", "operator"] {
            assert_eq!(schemes[name]["type"], "http", "{name}");
            assert_eq!(schemes[name]["scheme"], "bearer", "{name}");
        }
        let mut admin = 0;
        for (method, path, op) in operations(&doc) {
            let Some(security) = op["security"].as_array() else {
                continue;
            };
            let names: Vec<&str> = security
                .iter()
                .flat_map(|s| s.as_object().unwrap().keys().map(String::as_str))
                .collect();
            if path.starts_with("/v1/admin/") {
                admin += 1;
                assert_eq!(names, ["operator"], "{method} {path}");
                assert_eq!(op["tags"], serde_json::json!(["admin"]), "{method} {path}");
            } else {
                assert_eq!(names, ["bearer"], "{method} {path}");
                assert_ne!(op["tags"], serde_json::json!(["admin"]), "{method} {path}");
            }
        }
        assert_eq!(admin, 18);
        assert!(
            doc["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "admin")
        );
    }

    #[test]
    fn a_registration_id_in_the_path_is_a_non_empty_string() {
        let doc = default_doc();
        let op = operation(&doc, "post", "/v1/admin/runs/{run}/push/{id}/unpark");
        let id = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "id")
            .unwrap()
            .clone();
        assert_eq!(id["schema"]["type"], "string", "{id}");
        assert_eq!(id["schema"]["minLength"], 1, "{id}");
    }

    #[test]
    fn no_admin_view_has_a_credential_field() {
        let doc = default_doc();
        for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
            for field in schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
            {
                assert!(
                    !["token_hash", "credentials", "secret", "password"].contains(&field.as_str()),
                    "{name}.{field}"
                );
                // The one token a view carries is a new agent's, shown once.
                if field == "token" {
                    assert_eq!(name, "NewAgentView");
                }
            }
        }
    }

    #[test]
    fn the_agent_name_schema_is_validate_recipient_key() {
        let doc = default_doc();
        let name = &component(&doc, "AddAgent")["properties"]["name"];
        let rule = StringRule::of(name);
        assert_eq!(rule.max, crewbus_domain::MAX_RECIPIENT_KEY_LEN);
        for s in samples() {
            assert_eq!(
                rule.allows(&s),
                crewbus_domain::validate_recipient_key(&s).is_ok(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn optional_bodies_are_not_required_and_the_others_are() {
        let doc = default_doc();
        for path in [
            "/v1/inbox/fetch",
            "/v1/inbox/watch",
            "/v1/messages/{id}/acknowledge",
        ] {
            let body = &operation(&doc, "post", path)["requestBody"];
            assert_ne!(body["required"], true, "{path}: {body}");
        }
        for path in [
            "/v1/conversations",
            "/v1/conversations/{id}/messages",
            "/v1/inbox/confirm",
            "/v1/runs/{id}/seal",
            "/v1/admin/teams/{team}/agents",
            "/v1/admin/teams/{team}/conversations/{conversation}/messages",
        ] {
            let body = &operation(&doc, "post", path)["requestBody"];
            assert_eq!(body["required"], true, "{path}: {body}");
        }
    }

    #[test]
    fn the_served_document_carries_the_configured_fetch_limits() {
        let settings = BusSettings {
            max_fetch: 7,
            max_wait: Duration::from_millis(500),
            max_fetch_bytes: 2 << 20,
            ..BusSettings::default()
        };
        let fetch = component(&served(&settings), "FetchRequest");
        let limit = &fetch["properties"]["limit"];
        assert_eq!(
            (&limit["minimum"], &limit["maximum"]),
            (&Value::from(1), &Value::from(7))
        );
        let wait = &fetch["properties"]["wait_ms"];
        assert_eq!(
            (&wait["minimum"], &wait["maximum"]),
            (&Value::from(0), &Value::from(500))
        );
        let max_bytes = &fetch["properties"]["max_bytes"];
        assert_eq!(
            (
                &max_bytes["type"],
                &max_bytes["minimum"],
                &max_bytes["maximum"]
            ),
            (
                &Value::from("integer"),
                &Value::from(1),
                &Value::from(2 << 20)
            )
        );
        assert!(
            !fetch["required"]
                .as_array()
                .is_some_and(|r| r.contains(&Value::from("max_bytes"))),
            "{fetch}"
        );
        let watch = component(&served(&settings), "WatchRequest");
        // The watch clamps its wait: no maximum to refuse above.
        assert!(
            watch["properties"]["wait_ms"].get("maximum").is_none(),
            "{watch}"
        );
        assert_eq!(watch["properties"]["previews"]["default"], true);
        assert_eq!(
            watch["properties"]["after"]["maxLength"],
            crewbus_domain::MAX_CURSOR_CHARS
        );
        // The defaults: bus.max_fetch 100, bus.max_wait_ms 50 000, bus.max_fetch_bytes 16 MiB.
        let fetch = component(&default_doc(), "FetchRequest");
        assert_eq!(fetch["properties"]["limit"]["maximum"], 100);
        assert_eq!(fetch["properties"]["wait_ms"]["maximum"], 50_000);
        assert_eq!(fetch["properties"]["max_bytes"]["maximum"], 16 << 20);
    }

    #[test]
    fn confirm_takes_1_to_max_page_ids_and_members_at_most_max_page() {
        let doc = default_doc();
        let deliveries = &component(&doc, "ConfirmRequest")["properties"]["deliveries"];
        assert_eq!(deliveries["minItems"], 1);
        assert_eq!(deliveries["maxItems"], MAX_PAGE);
        let members = &component(&doc, "CreateConversation")["properties"]["members"];
        assert_eq!(members["maxItems"], MAX_PAGE);
    }

    #[test]
    fn the_seal_outcome_is_the_enum_of_every_run_outcome() {
        let doc = default_doc();
        let outcome = component(&doc, "RunOutcome");
        let names: Vec<&str> = outcome["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{outcome}"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let all = [
            RunOutcome::Succeeded,
            RunOutcome::Failed,
            RunOutcome::Cancelled,
        ];
        assert_eq!(names, all.map(RunOutcome::as_str));
        for o in all {
            // The API's names are the domain's serde names, both ways.
            let api = serde_json::to_value(Outcome::from(o)).unwrap();
            assert_eq!(api, serde_json::to_value(o).unwrap());
            assert_eq!(
                RunOutcome::from(serde_json::from_value::<Outcome>(api).unwrap()),
                o
            );
        }
        let seal = component(&doc, "SealRequest");
        assert_eq!(
            seal["properties"]["outcome"]["$ref"],
            "#/components/schemas/RunOutcome"
        );
        let run = component(&doc, "RunView");
        assert!(
            run["properties"]["outcome"]
                .to_string()
                .contains("RunOutcome"),
            "{run}"
        );
    }

    /// A string schema's rule: its pattern (ECMA-262 as written, here read by the `regex` crate)
    /// and its length bounds, in characters.
    struct StringRule {
        pattern: regex::Regex,
        min: usize,
        max: usize,
    }

    impl StringRule {
        fn of(schema: &Value) -> Self {
            StringRule {
                pattern: regex::Regex::new(schema["pattern"].as_str().unwrap()).unwrap(),
                min: schema["minLength"].as_u64().unwrap() as usize,
                max: schema["maxLength"].as_u64().unwrap() as usize,
            }
        }

        fn allows(&self, s: &str) -> bool {
            let n = s.chars().count();
            self.pattern.is_match(s) && (self.min..=self.max).contains(&n)
        }
    }

    /// Strings around every code point of the Basic Multilingual Plane's first 0x3100 and a few
    /// above: the character alone, between letters, between spaces, and long runs.
    fn samples() -> Vec<String> {
        let mut out = vec![String::new()];
        let chars = (0..0x3100u32)
            .chain([0xFEFF, 0xFFFD, 0x1F600, 0x10FFFF])
            .filter_map(char::from_u32);
        for c in chars {
            out.push(c.to_string());
            out.push(format!("a{c}b"));
            out.push(format!(" {c} "));
        }
        for n in [127, 128, 129] {
            out.push("x".repeat(n));
            out.push("é".repeat(n));
        }
        out
    }

    #[test]
    fn the_title_schema_is_validate_name() {
        let doc = default_doc();
        let title = &component(&doc, "CreateConversation")["properties"]["title"];
        let rule = StringRule::of(title);
        assert_eq!(rule.max, MAX_NAME_LEN);
        for s in samples() {
            assert_eq!(
                rule.allows(&s),
                crewbus_domain::validate_name("title", &s).is_ok(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn the_status_schema_is_validate_status() {
        let doc = default_doc();
        let status = &component(&doc, "SetStatus")["properties"]["status"];
        let rule = StringRule::of(status);
        assert_eq!(rule.max, crewbus_domain::MAX_STATUS_CHARS);
        for s in samples()
            .into_iter()
            .chain(["x".repeat(200), "é".repeat(201), "🦀".repeat(200)])
        {
            assert_eq!(
                rule.allows(&s),
                crewbus_domain::validate_status(&s).is_ok(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn the_request_id_schema_is_validate_request_id() {
        let doc = default_doc();
        let request_id = &component(&doc, "SendMessage")["properties"]["request_id"];
        let rule = StringRule::of(request_id);
        assert_eq!(rule.max, MAX_REQUEST_ID_LEN);
        for s in samples() {
            assert_eq!(
                rule.allows(&s),
                crewbus_domain::validate_request_id(&s).is_ok(),
                "{s:?}"
            );
        }
    }
}
