//! An agent operation, declared once for both edges: its name (the MCP tool's and the OpenAPI
//! `operationId`), what a model is told of it, its HTTP route and document entry, the argument
//! shapes of each edge with the one mapping between them (HTTP's into MCP's, which the use case
//! runs with), the use case and its answer. The HTTP route, handler and OpenAPI entry
//! (`http/operations.rs`) and the MCP tool's catalogue entry and dispatch (`mcp/tools`) are
//! derived from it. The declarations are in [`super::operations`], a file per group.

use std::future::Future;

use crewbus_domain::{Agent, BusResult};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};

use crate::usecases::bus::Bus;

/// What an operation does to the bus, as the MCP tool's annotations tell a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Reads only.
    ReadOnly,
    /// Writes; repeating the call with the same arguments changes nothing more.
    Idempotent,
    /// Writes something that cannot be undone.
    Destructive,
    /// Writes, and a repeat writes again (a new conversation, a new hand-out, a new run).
    Additive,
}

/// The HTTP method of an operation's route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
    Put,
}

/// No HTTP arguments: nothing of the request is read but its token.
pub(crate) struct Nothing;

/// A tool without arguments.
#[derive(Debug, Default, serde::Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

/// The HTTP arguments are the path's `{id}` (documented with [`Operation::ID`]); one that is not
/// a UUID is `400 invalid`. With a [`Query`] or [`Body`] as `(Id, Query<T>)`, `(Id, Body<T>)`.
pub(crate) struct Id(pub crewbus_domain::Uuid);

/// The HTTP arguments are the query string, read as `T` (its parameters documented by `T`'s
/// `IntoParams`); a query that does not fit is `400 invalid`.
pub(crate) struct Query<T>(pub T);

/// The HTTP arguments are a JSON object body read as `T` (documented as `T`'s schema, required);
/// one that does not fit is `400 invalid`, one over the request limit `413 too_large`.
pub(crate) struct Body<T>(pub T);

/// An operation's HTTP arguments ([`Nothing`], [`Id`], [`Query`], [`Body`]): read from the request after
/// its token, and documented in the OpenAPI document. Implemented beside the routes
/// (`http/operations.rs`), with the API's extractors.
pub(crate) trait HttpArguments: Sized + Send + 'static {
    /// Reads them; what does not fit is the API's JSON error.
    fn read(
        request: axum::extract::Request,
    ) -> impl Future<Output = Result<Self, crate::edge::error::ApiError>> + Send;
    /// The OpenAPI components they refer to (a body's schema and those it names).
    fn components(_schemas: &mut Vec<(String, RefOr<Schema>)>) {}
    /// Adds their parameters or request body to the route's OpenAPI entry; `id` says what the
    /// path's `{id}` names.
    fn document(
        operation: utoipa::openapi::path::OperationBuilder,
        _id: &str,
    ) -> utoipa::openapi::path::OperationBuilder {
        operation
    }
}

/// One agent operation (see the module's docs).
pub(crate) trait Operation: Send + Sync + 'static {
    /// Its name: the MCP tool's, and the `operationId` of its HTTP route.
    const NAME: &'static str;
    /// The MCP tool's title.
    const TITLE: &'static str;
    /// Its description for a model under the MCP full profile (which also sees the output
    /// schema).
    const DESCRIPTION: &'static str;
    /// Its description for a model under the MCP core profile, for an operation core lists
    /// (`None`: not in core). It names the answer's main fields.
    const CORE: Option<&'static str> = None;
    /// What it does to the bus.
    const EFFECT: Effect;
    /// Its HTTP route's method.
    const METHOD: Method;
    /// Its HTTP route's path.
    const PATH: &'static str;
    /// What its path's `{id}` names, as documented (when it has one).
    const ID: &'static str = "";
    /// Its HTTP route's status when it succeeds.
    const STATUS: u16 = 200;
    /// The OpenAPI tag of its route.
    const TAG: &'static str;
    /// The OpenAPI summary of its route, for the reader of the HTTP API.
    const SUMMARY: &'static str;
    /// The error answers its route documents beside `401` and `503` (which every agent route
    /// documents): `(status, when)`.
    const ERRORS: &'static [(u16, &'static str)] = &[];

    /// Its HTTP arguments: [`Nothing`], [`Id`], [`Query`] or [`Body`], or `Id` with one of those.
    type Http: HttpArguments;
    /// Its MCP arguments: the tool's input schema, what a call's arguments are parsed into, and
    /// what [`Operation::run`] takes.
    type Mcp: DeserializeOwned + ToSchema + Send + 'static;
    /// What the use case answers, and the HTTP route's answer (with [`Operation::STATUS`]).
    type Answer: Serialize + ToSchema + Send;
    /// The MCP tool's answer (its output schema): a JSON object, made from the answer (most
    /// operations: the answer itself).
    type McpAnswer: Serialize + ToSchema + Send + From<Self::Answer>;

    /// The one mapping between the two argument shapes: the HTTP arguments as the MCP ones,
    /// which the use case is run with.
    fn from_http(arguments: Self::Http) -> BusResult<Self::Mcp>;
    /// The OpenAPI schema of the HTTP answer: a reference to `Answer`'s component.
    fn answer_schema() -> RefOr<Schema> {
        Ref::from_schema_name(<Self::Answer as ToSchema>::name()).into()
    }
    /// The OpenAPI components the HTTP answer refers to: `Answer`'s and those its schema names.
    fn answer_components(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        component::<Self::Answer>(schemas);
    }

    /// Runs the use case for `agent`.
    fn run(
        bus: &Bus,
        agent: &Agent,
        arguments: Self::Mcp,
    ) -> impl Future<Output = BusResult<Self::Answer>> + Send;
}

/// `T`'s OpenAPI component and those its schema names.
pub(crate) fn component<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

/// What walks a list of operations: the HTTP router and document, and the MCP catalogue.
pub(crate) trait Visit {
    /// Called once per operation, in the list's order.
    fn operation<O: Operation>(&mut self);
}
