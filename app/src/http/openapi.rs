//! The OpenAPI document, generated from the handlers and views.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::views::*;
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
        InboxStatusView, HealthReport, RunView, SealRequest, RecordView, RecordsView
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
