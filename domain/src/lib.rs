//! crewbus domain: the bus's value types, errors and pure rules.
//!
//! Nothing here does I/O or names an adapter, a broker or a database. Adapters and use cases
//! share these types through the ports in `crewbus-ports`.
#![warn(missing_docs)]

mod backoff;
mod conversation;
mod delivery;
mod delivery_rules;
mod envelope;
mod error;
mod feed;
mod history;
mod ids;
mod inbox;
mod inbox_event;
mod inbox_news;
mod instant;
mod journal;
mod lease;
mod lease_grant;
mod ledger_args;
mod ledger_counts;
mod locator;
mod message;
mod model_text;
mod operator;
mod outbox;
mod oversight;
mod presence;
mod published;
mod push;
mod push_transport;
mod quota;
mod rate;
mod receipt;
mod repeated_warning;
mod search;
mod search_text;
mod secret;
mod send_rules;
mod snippet;
mod store_error;
mod team;
mod wakeup;
mod watch_cursor;

pub use backoff::Backoff;
pub use conversation::{Conversation, Member};
pub use delivery::{
    ConfirmOutcome, DeliveryId, HandOut, HandOutOutcome, HandOutRequest, HandOutSource, InboxAck,
};
pub use delivery_rules::{
    CandidateFacts, ConfirmFacts, HandOutPlan, IssuedHandOut, LiveHandOut, decide_confirms,
    plan_hand_outs,
};
pub use envelope::{Envelope, stored_body};
pub use error::{BusError, BusResult, Source};
pub use feed::{FeedEvent, FeedKind, FeedUpdate, coalesce, decode_feed, encode_feed};
pub use history::{
    Absence, HistoryItem, HistoryPage, MAX_PAGE, MAX_POSITION, validate_limit, validate_position,
};
pub use ids::{RunId, Seq, TenantId};
pub use inbox::{
    InboxRef, InboxStatus, MAX_RECIPIENT_KEY_LEN, parse_queue_ack_token, queue_ack_token,
    validate_recipient_key,
};
pub use inbox_event::{InboxEvent, ReferencePayload};
pub use inbox_news::{InboxNews, MAX_WATCH_NEWS, NewsItem, Reported};
pub use instant::{after, before};
pub use journal::{
    MAX_NOTE_LEN, Record, RecordKind, Run, RunOutcome, check_appendable, validate_journal_limit,
    validate_note_text,
};
pub use lease::{
    FencingToken, LeaseClaim, LeaseMode, LeasePattern, MAX_LEASE_PATTERN_CHARS, MAX_LEASE_SEGMENTS,
    validate_lease_path,
};
pub use lease_grant::{
    Acquired, Lease, LeaseEnd, LeaseEnding, LeaseEvent, LeaseEventKind, LeaseFilter,
    MAX_LEASE_LIST, MAX_LEASES_PER_AGENT, check_lease_change, decide_acquire, release_ending,
    validate_lease_ttl,
};
pub use ledger_args::{ledger_span, positive_ledger_span, validate_backend_name, validate_batch};
pub use ledger_counts::{LedgerCounts, RetentionTarget};
pub use locator::{INBOX_LOCATOR_PREFIX, Locator};
pub use message::{
    MAX_REQUEST_ID_LEN, Message, Publication, RequestKey, SendRequest, Sent, body_sha256,
    validate_request_id,
};
pub use model_text::{NAME_CHARS, PREVIEW_CHARS, clean_for_model, quote_for_model};
pub use operator::{
    Operator, OperatorScope, OperatorSession, SIGN_IN_CODE_TTL_SECS, human_member_name,
    new_operator_teams, validate_operator_name,
};
pub use outbox::{LeasedSlot, SettleOutcome, Settlement, SlotOutcome};
pub use oversight::{
    ActivityBucket, AgentActivity, ConversationSummary, DeliveryState, MAX_ACTIVITY_BUCKETS,
    RecipientState, StorageUse, bucket_start, fill_buckets, in_asked_order, validate_activity,
};
pub use presence::{MAX_STATUS_CHARS, StatusLine, validate_status};
pub use published::Published;
pub use push::{
    AttemptOutcome, DEFAULT_ATTEMPTS_KEPT, DataKey, Destination, PushAttempt, PushAuthentication,
    PushConfig, PushRegistration, WrappedKey, redact_url,
};
pub use push_transport::{PushRequest, PushResponse, TransportError};
pub use quota::{Provisioned, QuotaChange, Quotas, Reservation, StorageAccount, StreamKind};
pub use rate::{RateLimit, TokenBucket, retry_after_seconds, take_chunk};
pub use receipt::Receipt;
pub use repeated_warning::{MAX_WARNING_KINDS, RepeatedWarning, RepeatedWarnings, WARNING_PERIOD};
pub use search::{
    DEFAULT_SEARCH_LIMIT, IndexEntry, IndexPosition, MAX_SEARCH_DEPTH, MAX_SEARCH_LIMIT,
    MAX_SEARCH_TEXT_CHARS, SearchHit, SearchPage, SearchQuery,
};
pub use search_text::{
    MAX_INDEXED_BODY_BYTES, MAX_QUERY_WORDS, MAX_TOKEN_BYTES, Phrase, SearchDocument, SearchTerms,
    TITLE_WEIGHT, Token, indexed_body, tokens, words,
};
pub use secret::Secret;
pub use send_rules::{
    ConversationFacts, RunFacts, SendDecision, SendFacts, answer_sends, plan_sends,
};
pub use snippet::{SNIPPET_CHARS, SnippetSegment, snippet};
pub use store_error::StoreError;
pub use team::{Agent, AgentKind, MAX_NAME_LEN, Team, TokenHash, recipient_key_for, validate_name};
pub use wakeup::{
    SweepTarget, Wakeup, WakeupTarget, lease_wakeup_from_payload, lease_wakeup_payload,
};
pub use watch_cursor::{
    CURSOR_SKEW, MAX_CURSOR_CHARS, MAX_CURSOR_IDS, MIN_CURSOR_CHARS, WatchCursor,
};

/// Re-exported so adapters and the app agree on one id and time type.
pub use chrono::{DateTime, Utc};
pub use uuid::Uuid;

/// The bus's body size contract: 1 MiB per body, in bytes. Adapters may be configured lower.
pub const MAX_BODY_BYTES: u64 = 1024 * 1024;
