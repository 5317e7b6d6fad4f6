//! Projections: what one journal record becomes on the wire. Default: a CloudEvents 1.0 JSON
//! event (structured mode) that carries ids, never message bodies.

use std::fmt;

use crewbus_domain::{Record, TenantId};
use serde_json::{Value, json};

/// The content type of a structured-mode CloudEvents JSON event.
pub const CLOUDEVENTS_JSON: &str = "application/cloudevents+json";

/// One event ready to sign and POST.
#[derive(Clone, PartialEq, Eq)]
pub struct Event {
    /// The `content-type` header value.
    pub content_type: &'static str,
    /// The request body (signed as is).
    pub body: Vec<u8>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("content_type", &self.content_type)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

/// Turns a journal record into the event a destination receives, or `None` for a record kind the
/// projection does not send (the worker then moves the cursor over it without a request).
///
/// A projection must be a pure function of its arguments: a retry must produce the same bytes.
pub trait Projection: Send + Sync {
    /// The event for `record` of a run of `tenant`, or `None` to skip it.
    fn project(&self, tenant: &TenantId, record: &Record) -> Option<Event>;
}

/// The operator default: every record kind as one CloudEvents 1.0 event.
///
/// Shape: `specversion` `"1.0"`; `id` `<run>/<seq>` (unique per `source`); `source`
/// `/crewbus/<tenant>/runs/<run>`; `type` `dev.crewbus.run.<kind>` (`run_admitted`,
/// `message_sent`, …, `run_sealed`); `time` the record's time (RFC 3339); `subject` the journal
/// seq; `datacontenttype` `application/json`; `data` the record itself (`run`, `seq`, `at`,
/// `kind` and the kind's fields — conversation, message and team ids, a note's or seal's text,
/// never a message body, which records do not hold).
#[derive(Debug, Clone, Copy, Default)]
pub struct CloudEvents;

impl Projection for CloudEvents {
    fn project(&self, tenant: &TenantId, record: &Record) -> Option<Event> {
        let data = serde_json::to_value(record).ok()?;
        let kind = data
            .get("kind")
            .and_then(|k| k.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        let event = json!({
            "specversion": "1.0",
            "id": format!("{}/{}", record.run, record.seq),
            "source": format!("/crewbus/{}/runs/{}", tenant, record.run),
            "type": format!("dev.crewbus.run.{kind}"),
            "time": record.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "subject": record.seq.0.to_string(),
            "datacontenttype": "application/json",
            "data": data,
        });
        Some(Event {
            content_type: CLOUDEVENTS_JSON,
            body: serde_json::to_vec(&event).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use crewbus_domain::{RecordKind, RunId, RunOutcome, Seq, Uuid};

    #[test]
    fn a_record_becomes_a_cloudevent_with_ids_only() {
        let run = RunId::new();
        let message = Uuid::new_v4();
        let record = Record {
            run,
            seq: Seq(4),
            at: Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap(),
            kind: RecordKind::MessageSent {
                conversation: Uuid::new_v4(),
                message,
                seq: 9,
            },
        };
        let tenant = TenantId::new("acme").unwrap();
        let event = CloudEvents.project(&tenant, &record).unwrap();
        assert_eq!(event.content_type, CLOUDEVENTS_JSON);
        let v: Value = serde_json::from_slice(&event.body).unwrap();
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["id"], format!("{run}/4"));
        assert_eq!(v["source"], format!("/crewbus/acme/runs/{run}"));
        assert_eq!(v["type"], "dev.crewbus.run.message_sent");
        assert_eq!(v["time"], "2026-11-30T09:00:00.000000Z");
        assert_eq!(v["data"]["kind"]["message"], message.to_string());
        assert!(v["data"].get("body").is_none());
        // Same record, same bytes: a retry is byte-identical, so its signature is stable.
        assert_eq!(CloudEvents.project(&tenant, &record).unwrap(), event);
    }

    #[test]
    fn the_terminal_record_has_its_own_type() {
        let record = Record {
            run: RunId::new(),
            seq: Seq(2),
            at: Utc::now(),
            kind: RecordKind::RunSealed {
                outcome: RunOutcome::Succeeded,
                reason: "done".into(),
            },
        };
        let event = CloudEvents.project(&TenantId::default(), &record).unwrap();
        let v: Value = serde_json::from_slice(&event.body).unwrap();
        assert_eq!(v["type"], "dev.crewbus.run.run_sealed");
    }
}
