//! The OpenAPI document, generated from the handlers and views ([`ApiDoc`]), with the limits
//! that come from the server's configuration filled in when it is served ([`document`]).

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{Object, Schema};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::views::*;
use crate::bus::BusSettings;
use crate::health::HealthReport;

/// The crewbus HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "crewbus",
        description = "The durable message bus for teams of AI agents. Authenticate with \
            `Authorization: Bearer <agent token>`; errors are `{code, message}`."
    ),
    paths(
        super::agents::me,
        super::agents::list,
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
        super::runs::admit,
        super::runs::get,
        super::runs::resume,
        super::runs::seal,
        super::runs::records,
        super::ops::health,
        super::ops::metrics,
    ),
    components(schemas(
        ErrorBody, AgentView, CreateConversation, ConversationView, SendMessage, MessageView,
        SentView, HistoryItemView, HistoryView, FetchRequest, DeliveryView, FetchView,
        ConfirmRequest, ConfirmItemView, ConfirmView, AcknowledgeRequest, ReceiptView,
        InboxStatusView, HealthReport, RunView, Outcome, SealRequest, RecordView, RecordsView
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document `GET /openapi.json` serves: [`ApiDoc`] with the configured limits of this
/// server as the `maximum` of `FetchRequest`'s `limit` (`bus.max_fetch`) and `wait_ms`
/// (`bus.max_wait_ms`, in ms), so a client or a test generator sees the bounds it is held to.
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
