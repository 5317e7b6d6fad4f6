//! The one place where broker and client errors become [`BusError`] and [`Published`].
//!
//! async-nats errors are first reduced to a [`Failure`]: the typed JetStream error code (read
//! from the API response or from the error's source), or the client error kind. [`bus_error`]
//! then decides the [`BusError`] variant from that alone — never from message text; the
//! original error is kept for logs only.

use std::error::Error as StdError;
use std::sync::Arc;

use async_nats::jetstream;
use async_nats::jetstream::context::{
    AccountError, AccountErrorKind, ConsumerInfoError, ConsumerInfoErrorKind, CreateStreamError,
    CreateStreamErrorKind, GetStreamError, GetStreamErrorKind, PublishError, PublishErrorKind,
    RequestError, RequestErrorKind,
};
use async_nats::jetstream::stream::{
    ConsumerError, ConsumerErrorKind, DirectGetError, DirectGetErrorKind, LastRawMessageError,
    LastRawMessageErrorKind, PurgeError, PurgeErrorKind,
};
use async_nats::{ConnectError, ConnectErrorKind, StatusCode};
use crewbus_domain::{BusError, BusResult, Published, Source};

/// JetStream API error codes the adapter tells apart (the broker's `err_code`).
pub(crate) mod code {
    /// Account resources exceeded (streams, consumers, storage of the account).
    pub const ACCOUNT_RESOURCES_EXCEEDED: u64 = 10002;
    /// Bad request.
    pub const BAD_REQUEST: u64 = 10003;
    /// Cluster has no peers / not available / incomplete / not leader.
    pub const CLUSTER_UNAVAILABLE: [u64; 5] = [10004, 10005, 10006, 10008, 10009];
    /// Consumer name already in use with another configuration.
    pub const CONSUMER_NAME_EXIST: u64 = 10013;
    /// Consumer not found.
    pub const CONSUMER_NOT_FOUND: u64 = 10014;
    /// Insufficient resources on the server.
    pub const INSUFFICIENT_RESOURCES: u64 = 10023;
    /// Maximum consumers / streams reached.
    pub const MAXIMUM_LIMITS: [u64; 2] = [10026, 10027];
    /// No message found.
    pub const NO_MESSAGE_FOUND: u64 = 10037;
    /// JetStream not enabled for the account.
    pub const JETSTREAM_NOT_ENABLED_FOR_ACCOUNT: u64 = 10039;
    /// Storage resources exceeded: the account cannot reserve what a stream asks.
    pub const STORAGE_RESOURCES_EXCEEDED: u64 = 10047;
    /// Invalid stream configuration.
    pub const STREAM_INVALID_CONFIG: u64 = 10052;
    /// Message larger than the stream's maximum message size.
    pub const STREAM_MESSAGE_EXCEEDS_MAXIMUM: u64 = 10054;
    /// Stream name already in use with another configuration.
    pub const STREAM_NAME_EXIST: u64 = 10058;
    /// Stream not found.
    pub const STREAM_NOT_FOUND: u64 = 10059;
    /// Stream replicas not supported (no cluster).
    pub const STREAM_REPLICAS_NOT_SUPPORTED: u64 = 10074;
    /// JetStream not enabled.
    pub const JETSTREAM_NOT_ENABLED: u64 = 10076;
    /// Generic store failure: stream full (discard new) or per-subject limit reached.
    pub const STREAM_STORE_FAILED: u64 = 10077;
    /// Work-queue consumers must not overlap.
    pub const CONSUMER_WQ_NOT_UNIQUE: [u64; 2] = [10099, 10100];
    /// Stream or consumer offline (clustered).
    pub const OFFLINE: [u64; 2] = [10118, 10119];
}

/// What went wrong, reduced to typed facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A JetStream API error with its code.
    Code(u64),
    /// Nobody answered the subject: the stream does not exist or its intake is paused.
    NoResponders,
    /// No answer within the bound.
    TimedOut,
    /// The connection broke while waiting.
    Disconnected,
    /// The message, consumer or stream asked for is not there.
    NotFound,
    /// The client refused a message above the server's `max_payload`.
    TooLarge,
    /// A name or subject the client refused.
    InvalidName,
    /// The server refused the credential.
    Unauthenticated,
    /// Anything else (kept as the source for logs).
    Other,
}

/// A classified failure and the original error.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) fault: Fault,
    pub(crate) source: Option<Source>,
}

impl Failure {
    pub(crate) fn new(fault: Fault) -> Self {
        Failure {
            fault,
            source: None,
        }
    }

    fn with(fault: Fault, source: impl StdError + Send + Sync + 'static) -> Self {
        Failure {
            fault,
            source: Some(Arc::new(source)),
        }
    }

    /// The JetStream error code, when the failure is a JetStream API error.
    pub(crate) fn code(&self) -> Option<u64> {
        match self.fault {
            Fault::Code(c) => Some(c),
            _ => None,
        }
    }

    /// Whether the broker says the thing asked for does not exist (message, consumer, stream).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(
            self.fault,
            Fault::NotFound
                | Fault::Code(code::STREAM_NOT_FOUND)
                | Fault::Code(code::CONSUMER_NOT_FOUND)
                | Fault::Code(code::NO_MESSAGE_FOUND)
        )
    }
}

/// A broker request's answer where "not found" means there is none: `Ok(None)`; any other
/// failure is the bus error of a request doing `what`.
pub(crate) fn found<T, E>(answer: Result<T, E>, what: &str) -> BusResult<Option<T>>
where
    Failure: From<E>,
{
    match answer {
        Ok(found) => Ok(Some(found)),
        Err(e) => {
            let failure = Failure::from(e);
            if failure.is_not_found() {
                Ok(None)
            } else {
                Err(bus_error(Op::Request, what, failure))
            }
        }
    }
}

/// What the failed call was doing; a few codes mean different things for a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Storing a body or a reference.
    Publish,
    /// Any other request.
    Request,
}

/// THE mapping: a classified failure of `what` to a [`BusError`].
///
/// Decided by the JetStream code or the client error kind only. The broker's own error stays
/// the `source` of `Unavailable` (or is logged), never part of the `Display`.
pub(crate) fn bus_error(op: Op, what: &str, failure: Failure) -> BusError {
    let what = what.to_owned();
    if let Some(source) = &failure.source {
        tracing::debug!(what = %what, fault = ?failure.fault, error = %source, "broker call failed");
    }
    let unavailable = |what: String, source: Option<Source>| BusError::Unavailable { what, source };
    match failure.fault {
        Fault::Code(c) => match c {
            code::STREAM_STORE_FAILED => BusError::quota_exceeded(what),
            code::STORAGE_RESOURCES_EXCEEDED if op == Op::Publish => {
                BusError::quota_exceeded(format!("{what}: the account's storage is full"))
            }
            code::STORAGE_RESOURCES_EXCEEDED => BusError::InsufficientStorage {
                extra: 0,
                per_replica: 0,
                replicas: 1,
                used: 0,
                reserved: 0,
                budget: None,
                remedy: "the broker refused the reservation; raise the account's storage limit \
                         or lower max_bytes"
                    .to_owned(),
            },
            code::ACCOUNT_RESOURCES_EXCEEDED => BusError::quota_exceeded(what),
            c if code::MAXIMUM_LIMITS.contains(&c) => BusError::quota_exceeded(what),
            code::STREAM_MESSAGE_EXCEEDS_MAXIMUM => BusError::TooLarge { size: 0, limit: 0 },
            code::STREAM_NOT_FOUND => BusError::NotProvisioned {
                what,
                remedy: "provision the team's streams with the provisioning credential".into(),
            },
            code::CONSUMER_NOT_FOUND | code::NO_MESSAGE_FOUND => BusError::not_found(what),
            code::STREAM_NAME_EXIST | code::CONSUMER_NAME_EXIST => BusError::conflict(what),
            c if code::CONSUMER_WQ_NOT_UNIQUE.contains(&c) => BusError::conflict(what),
            code::BAD_REQUEST
            | code::STREAM_INVALID_CONFIG
            | code::STREAM_REPLICAS_NOT_SUPPORTED => {
                BusError::invalid(format!("{what}: the broker refused the configuration"))
            }
            code::INSUFFICIENT_RESOURCES
            | code::JETSTREAM_NOT_ENABLED
            | code::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT => unavailable(what, failure.source),
            c if code::CLUSTER_UNAVAILABLE.contains(&c) || code::OFFLINE.contains(&c) => {
                unavailable(what, failure.source)
            }
            _ => unavailable(what, failure.source),
        },
        Fault::NoResponders => unavailable(
            format!("{what}: no responders (stream missing or intake paused)"),
            failure.source,
        ),
        Fault::TimedOut => BusError::timeout(what),
        Fault::Disconnected | Fault::Other => unavailable(what, failure.source),
        Fault::NotFound => BusError::not_found(what),
        Fault::TooLarge => BusError::TooLarge { size: 0, limit: 0 },
        Fault::InvalidName => BusError::invalid(what),
        Fault::Unauthenticated => BusError::Unauthenticated,
    }
}

/// A failed publish as a [`Published`]: `Uncertain` when the request had left and no answer
/// came (time-out or broken connection while awaiting the PubAck); otherwise `Retryable` or
/// `Fatal` by [`BusError::is_retryable`].
pub(crate) fn published(what: &str, failure: Failure, sent: bool) -> Published {
    let uncertain = sent && matches!(failure.fault, Fault::TimedOut | Fault::Disconnected);
    let error = bus_error(Op::Publish, what, failure);
    if uncertain {
        Published::Uncertain(error)
    } else {
        Published::from_error(error)
    }
}

/// Looks through an error's source chain for a typed JetStream code or request kind.
fn from_chain(err: &(dyn StdError + 'static)) -> Fault {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(js) = e.downcast_ref::<jetstream::Error>() {
            return Fault::Code(js.error_code().0);
        }
        if let Some(r) = e.downcast_ref::<RequestError>() {
            match r.kind() {
                RequestErrorKind::NoResponders => return Fault::NoResponders,
                RequestErrorKind::TimedOut => return Fault::TimedOut,
                RequestErrorKind::InvalidSubject => return Fault::InvalidName,
                RequestErrorKind::Other => {}
            }
        }
        if let Some(r) = e.downcast_ref::<async_nats::RequestError>() {
            match r.kind() {
                async_nats::RequestErrorKind::NoResponders => return Fault::NoResponders,
                async_nats::RequestErrorKind::TimedOut => return Fault::TimedOut,
                async_nats::RequestErrorKind::InvalidSubject => return Fault::InvalidName,
                async_nats::RequestErrorKind::MaxPayloadExceeded => return Fault::TooLarge,
                async_nats::RequestErrorKind::Other => {}
            }
        }
        cur = e.source();
    }
    Fault::Other
}

impl From<PublishError> for Failure {
    fn from(e: PublishError) -> Self {
        let fault = match e.kind() {
            PublishErrorKind::StreamNotFound => Fault::NoResponders,
            PublishErrorKind::TimedOut => Fault::TimedOut,
            PublishErrorKind::BrokenPipe => Fault::Disconnected,
            PublishErrorKind::MaxPayloadExceeded => Fault::TooLarge,
            PublishErrorKind::MaxAckPending => Fault::Other,
            PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
                from_chain(&e)
            }
            PublishErrorKind::Other => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<RequestError> for Failure {
    fn from(e: RequestError) -> Self {
        let fault = from_chain(&e);
        Failure::with(fault, e)
    }
}

impl From<async_nats::RequestError> for Failure {
    fn from(e: async_nats::RequestError) -> Self {
        let fault = from_chain(&e);
        Failure::with(fault, e)
    }
}

impl From<CreateStreamError> for Failure {
    fn from(e: CreateStreamError) -> Self {
        let fault = match e.kind() {
            CreateStreamErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            CreateStreamErrorKind::NotFound => Fault::Code(code::STREAM_NOT_FOUND),
            CreateStreamErrorKind::TimedOut => Fault::TimedOut,
            CreateStreamErrorKind::JetStreamUnavailable => Fault::NoResponders,
            CreateStreamErrorKind::EmptyStreamName
            | CreateStreamErrorKind::InvalidStreamName
            | CreateStreamErrorKind::DomainAndExternalSet => Fault::InvalidName,
            CreateStreamErrorKind::Response | CreateStreamErrorKind::ResponseParse => {
                from_chain(&e)
            }
        };
        Failure::with(fault, e)
    }
}

impl From<GetStreamError> for Failure {
    fn from(e: GetStreamError) -> Self {
        let fault = match e.kind() {
            GetStreamErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            GetStreamErrorKind::EmptyName | GetStreamErrorKind::InvalidStreamName => {
                Fault::InvalidName
            }
            GetStreamErrorKind::Request => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<ConsumerInfoError> for Failure {
    fn from(e: ConsumerInfoError) -> Self {
        let fault = match e.kind() {
            ConsumerInfoErrorKind::NotFound => Fault::Code(code::CONSUMER_NOT_FOUND),
            ConsumerInfoErrorKind::StreamNotFound => Fault::Code(code::STREAM_NOT_FOUND),
            ConsumerInfoErrorKind::Offline => Fault::Code(code::OFFLINE[1]),
            ConsumerInfoErrorKind::TimedOut => Fault::TimedOut,
            ConsumerInfoErrorKind::NoResponders => Fault::NoResponders,
            ConsumerInfoErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            ConsumerInfoErrorKind::InvalidName => Fault::InvalidName,
            ConsumerInfoErrorKind::Request => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<ConsumerError> for Failure {
    fn from(e: ConsumerError) -> Self {
        let fault = match e.kind() {
            ConsumerErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            ConsumerErrorKind::TimedOut => Fault::TimedOut,
            ConsumerErrorKind::InvalidName | ConsumerErrorKind::InvalidConsumerType => {
                Fault::InvalidName
            }
            _ => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<LastRawMessageError> for Failure {
    fn from(e: LastRawMessageError) -> Self {
        let fault = match e.kind() {
            LastRawMessageErrorKind::NoMessageFound => Fault::NotFound,
            LastRawMessageErrorKind::InvalidSubject => Fault::InvalidName,
            LastRawMessageErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            LastRawMessageErrorKind::Other => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<DirectGetError> for Failure {
    fn from(e: DirectGetError) -> Self {
        let fault = match e.kind() {
            DirectGetErrorKind::NotFound => Fault::NotFound,
            DirectGetErrorKind::TimedOut => Fault::TimedOut,
            DirectGetErrorKind::InvalidSubject => Fault::InvalidName,
            DirectGetErrorKind::ErrorResponse(StatusCode::NO_RESPONDERS, _) => Fault::NoResponders,
            DirectGetErrorKind::ErrorResponse(StatusCode::NOT_FOUND, _) => Fault::NotFound,
            _ => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<PurgeError> for Failure {
    fn from(e: PurgeError) -> Self {
        let fault = match e.kind() {
            PurgeErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            PurgeErrorKind::TimedOut => Fault::TimedOut,
            PurgeErrorKind::Request => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<AccountError> for Failure {
    fn from(e: AccountError) -> Self {
        let fault = match e.kind() {
            AccountErrorKind::JetStream(js) => Fault::Code(js.error_code().0),
            AccountErrorKind::TimedOut => Fault::TimedOut,
            AccountErrorKind::JetStreamUnavailable => Fault::NoResponders,
            AccountErrorKind::Other => from_chain(&e),
        };
        Failure::with(fault, e)
    }
}

impl From<ConnectError> for Failure {
    fn from(e: ConnectError) -> Self {
        let fault = match e.kind() {
            ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
                Fault::Unauthenticated
            }
            ConnectErrorKind::TimedOut => Fault::TimedOut,
            ConnectErrorKind::ServerParse | ConnectErrorKind::Tls => Fault::InvalidName,
            _ => Fault::Disconnected,
        };
        Failure::with(fault, e)
    }
}

impl From<async_nats::jetstream::consumer::pull::BatchError> for Failure {
    fn from(e: async_nats::jetstream::consumer::pull::BatchError) -> Self {
        let fault = from_chain(&e);
        let fault = if fault == Fault::Other {
            Fault::Disconnected
        } else {
            fault
        };
        Failure::with(fault, e)
    }
}

impl From<jetstream::Error> for Failure {
    fn from(e: jetstream::Error) -> Self {
        Failure::with(Fault::Code(e.error_code().0), e)
    }
}

impl From<tokio::time::error::Elapsed> for Failure {
    fn from(_: tokio::time::error::Elapsed) -> Self {
        Failure::new(Fault::TimedOut)
    }
}

/// An error the pull batch reported mid-stream (a status such as 503 or 409); its text is
/// not inspected.
pub(crate) fn batch_item_failure(e: async_nats::Error) -> Failure {
    Failure {
        fault: Fault::Disconnected,
        source: Some(Arc::from(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_semantic_variants() {
        let map = |c| bus_error(Op::Request, "s", Failure::new(Fault::Code(c)));
        assert!(matches!(
            map(code::STREAM_STORE_FAILED),
            BusError::QuotaExceeded { .. }
        ));
        assert!(matches!(
            map(code::STORAGE_RESOURCES_EXCEEDED),
            BusError::InsufficientStorage { .. }
        ));
        assert!(matches!(
            bus_error(
                Op::Publish,
                "s",
                Failure::new(Fault::Code(code::STORAGE_RESOURCES_EXCEEDED))
            ),
            BusError::QuotaExceeded { .. }
        ));
        assert!(matches!(
            map(code::STREAM_NOT_FOUND),
            BusError::NotProvisioned { .. }
        ));
        assert!(matches!(
            map(code::CONSUMER_NOT_FOUND),
            BusError::NotFound { .. }
        ));
        assert!(matches!(
            map(code::STREAM_NAME_EXIST),
            BusError::Conflict { .. }
        ));
        assert!(matches!(
            map(code::STREAM_MESSAGE_EXCEEDS_MAXIMUM),
            BusError::TooLarge { .. }
        ));
    }

    #[test]
    fn no_answer_after_sending_is_uncertain_and_no_responders_is_retryable() {
        assert!(matches!(
            published("p", Failure::new(Fault::TimedOut), true),
            Published::Uncertain(BusError::Timeout { .. })
        ));
        assert!(matches!(
            published("p", Failure::new(Fault::TimedOut), false),
            Published::Retryable(BusError::Timeout { .. })
        ));
        assert!(matches!(
            published("p", Failure::new(Fault::NoResponders), true),
            Published::Retryable(BusError::Unavailable { .. })
        ));
        assert!(matches!(
            published("p", Failure::new(Fault::TooLarge), false),
            Published::Fatal(BusError::TooLarge { .. })
        ));
    }

    #[test]
    fn typed_js_code_is_read_from_the_source() {
        let js: jetstream::Error = serde_json_error(10077);
        let e = PublishError::with_source(PublishErrorKind::Other, js);
        assert_eq!(Failure::from(e).code(), Some(code::STREAM_STORE_FAILED));
    }

    fn serde_json_error(c: u64) -> jetstream::Error {
        // jetstream::Error has no public constructor; build it as the broker sends it.
        let raw = format!(r#"{{"code":503,"err_code":{c},"description":"x"}}"#);
        serde_json::from_str(&raw).expect("a JetStream API error")
    }
}
