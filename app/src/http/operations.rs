//! The routes of the agent operations declared once in [`crate::edge::operations`]: for each, its
//! route (one generic handler: the token, then its arguments read as declared, the use case, the
//! answer as JSON) and its entry in the OpenAPI document.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::routing::{MethodFilter, on};
use crewbus_domain::Uuid;
use serde::de::DeserializeOwned;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, ResponseBuilder, Schema};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::Authenticated;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::edge::error::{ApiError, ApiResult, ErrorBody};
use crate::edge::operation::{
    Body, HttpArguments, Id, Method, Nothing, Operation, Query, Visit, component,
};

impl HttpArguments for Nothing {
    async fn read(_: Request) -> Result<Self, ApiError> {
        Ok(Nothing)
    }
}

impl<T: DeserializeOwned + IntoParams + Send + 'static> HttpArguments for Query<T> {
    async fn read(request: Request) -> Result<Self, ApiError> {
        let (mut parts, _) = request.into_parts();
        let ApiQuery(t) = ApiQuery::<T>::from_request_parts(&mut parts, &()).await?;
        Ok(Query(t))
    }

    fn document(operation: OperationBuilder, _: &str) -> OperationBuilder {
        operation.parameters(Some(T::into_params(|| None)))
    }
}

impl<T: DeserializeOwned + ToSchema + Send + 'static> HttpArguments for Body<T> {
    async fn read(request: Request) -> Result<Self, ApiError> {
        let ApiJson(t) = ApiJson::<T>::from_request(request, &()).await?;
        Ok(Body(t))
    }

    fn components(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        component::<T>(schemas);
    }

    fn document(operation: OperationBuilder, _: &str) -> OperationBuilder {
        operation.request_body(Some(
            RequestBodyBuilder::new()
                .content("application/json", json(Ref::from_schema_name(T::name())))
                .required(Some(Required::True))
                .build(),
        ))
    }
}

impl HttpArguments for Id {
    async fn read(request: Request) -> Result<Self, ApiError> {
        let (mut parts, _) = request.into_parts();
        let ApiPath(id) = ApiPath::<Uuid>::from_request_parts(&mut parts, &()).await?;
        Ok(Id(id))
    }

    fn document(operation: OperationBuilder, id: &str) -> OperationBuilder {
        operation.parameter(
            ParameterBuilder::new()
                .name("id")
                .parameter_in(ParameterIn::Path)
                .description(Some(id))
                .required(Required::True)
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid))),
                )),
        )
    }
}

/// `{id}` and a query or body, read in that order (a bad id is refused before the rest is read).
impl<T: HttpArguments> HttpArguments for (Id, T) {
    async fn read(request: Request) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let ApiPath(id) = ApiPath::<Uuid>::from_request_parts(&mut parts, &()).await?;
        let rest = T::read(Request::from_parts(parts, body)).await?;
        Ok((Id(id), rest))
    }

    fn components(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        T::components(schemas);
    }

    fn document(operation: OperationBuilder, id: &str) -> OperationBuilder {
        T::document(Id::document(operation, id), id)
    }
}

/// The one handler: the caller's token, the arguments as `O` declares them (mapped to its MCP
/// arguments), its use case, its answer as JSON with its status.
async fn handle<O: Operation>(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    request: Request,
) -> ApiResult<(StatusCode, Json<O::Answer>)> {
    let arguments = O::from_http(O::Http::read(request).await?)?;
    let answer = O::run(&state.bus, &agent, arguments).await?;
    let status = StatusCode::from_u16(O::STATUS).unwrap_or(StatusCode::OK);
    Ok((status, Json(answer)))
}

/// The routes of every declared operation.
pub(crate) fn routes() -> axum::Router<AppState> {
    struct Routes(axum::Router<AppState>);
    impl Visit for Routes {
        fn operation<O: Operation>(&mut self) {
            let filter = match O::METHOD {
                Method::Get => MethodFilter::GET,
                Method::Post => MethodFilter::POST,
                Method::Put => MethodFilter::PUT,
            };
            let router = std::mem::take(&mut self.0);
            self.0 = router.route(O::PATH, on(filter, handle::<O>));
        }
    }
    let mut routes = Routes(axum::Router::new());
    crate::edge::operations::each(&mut routes);
    routes.0
}

/// Adds every declared operation to the OpenAPI document `openapi`, with the components its
/// body and answer refer to.
pub(crate) fn document(openapi: &mut utoipa::openapi::OpenApi) {
    struct Paths<'a>(&'a mut utoipa::openapi::OpenApi);
    impl Visit for Paths<'_> {
        fn operation<O: Operation>(&mut self) {
            let method = match O::METHOD {
                Method::Get => HttpMethod::Get,
                Method::Post => HttpMethod::Post,
                Method::Put => HttpMethod::Put,
            };
            self.0
                .paths
                .add_path_operation(O::PATH, vec![method], entry::<O>());
            let mut schemas = Vec::new();
            O::answer_components(&mut schemas);
            O::Http::components(&mut schemas);
            let components = self.0.components.get_or_insert_with(Default::default);
            components.schemas.extend(schemas);
        }
    }
    crate::edge::operations::each(&mut Paths(openapi));
}

/// `O`'s OpenAPI operation.
fn entry<O: Operation>() -> utoipa::openapi::path::Operation {
    let error = || json(Ref::from_schema_name(ErrorBody::name()));
    let mut responses = BTreeMap::new();
    responses.insert(O::STATUS, ("", json(O::answer_schema())));
    responses.insert(401, (UNAUTHENTICATED, error()));
    for (status, when) in O::ERRORS {
        responses.insert(*status, (*when, error()));
    }
    let mut operation = OperationBuilder::new()
        .tag(O::TAG)
        .summary(Some(O::SUMMARY))
        .operation_id(Some(O::NAME));
    operation = O::Http::document(operation, O::ID);
    for (status, (description, content)) in responses {
        operation = operation.response(
            status.to_string(),
            ResponseBuilder::new()
                .description(description)
                .content("application/json", content)
                .build(),
        );
    }
    operation
        .security(SecurityRequirement::new("bearer", Vec::<String>::new()))
        .build()
}

/// When every agent route answers `401`.
const UNAUTHENTICATED: &str = "no, a malformed, an unknown or a revoked token";

fn json(schema: impl Into<RefOr<Schema>>) -> utoipa::openapi::Content {
    ContentBuilder::new().schema(Some(schema)).build()
}
