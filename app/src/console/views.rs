//! What the templates print: values made readable (times, ages, sizes, delivery states) and
//! the views shared by several pages. Templates only print these; every string of an agent's is
//! escaped by the template.

use std::collections::HashMap;
use std::fmt;

use askama::Template;
use crewbus_domain::{
    Absence, AgentActivity, AgentKind, DateTime, DeliveryState, RecipientState, Utc, Uuid,
};
use sha2::{Digest, Sha256};

use crate::usecases::oversight::AdminMessage;

/// Longest part of a body the conversation page shows (2 KiB, cut at a character boundary);
/// the message page shows all of it.
pub(crate) const BODY_CUT_BYTES: usize = 2048;

/// Most lines of a body the conversation page shows (a body of many short lines is cut
/// before its 2 KiB).
pub(crate) const BODY_CUT_LINES: usize = 24;

/// HTML a template rendered, to be placed in another template as it is (askama does not escape
/// a [`Rendered`] again: its own template escaped every value in it). Made only from a
/// template, never from a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rendered(String);

impl Rendered {
    /// Renders `t`. Errors: the template's (a value whose `Display` failed).
    pub(crate) fn of(t: &impl Template) -> askama::Result<Rendered> {
        t.render().map(Rendered)
    }

    /// The HTML.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// 16 hex digits of the HTML's SHA-256: a page passes the fingerprint of its live part to
    /// its stream, which sends the part only when it rendered something else.
    pub(crate) fn fingerprint(&self) -> String {
        let mut digest = hex::encode(Sha256::digest(self.0.as_bytes()));
        digest.truncate(16);
        digest
    }
}

impl fmt::Display for Rendered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl askama::filters::HtmlSafe for Rendered {}

/// The explicit bidirectional formatting characters (Unicode's embeddings, overrides and
/// isolates: LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI): what "Trojan Source" spoofing uses to
/// show `report \u{202E}gnp.exe` as "report exe.png".
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with each explicit bidirectional formatting character shown as `[U+XXXX]` instead of
/// acting: what an agent wrote, made inert for the page (stored and answered unchanged
/// elsewhere). The page also isolates every such string (`<bdi>`, or `dir="auto"` on a block),
/// so the remaining right-to-left text cannot reorder what is around it.
pub(crate) fn inert(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(is_bidi_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_bidi_control(c) {
            shown.push_str(&format!("[U+{:04X}]", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// The console's askama filters, in scope of every module with a template
/// (`use super::views::filters;`).
pub(crate) mod filters {
    /// `{{ text|inert }}`: text an agent (or anyone but the console) wrote, its bidirectional
    /// controls shown ([`super::inert`]); escaped by the template as every value is.
    #[askama::filter_fn]
    pub fn inert<T: std::fmt::Display>(text: T, _: &dyn askama::Values) -> askama::Result<String> {
        Ok(super::inert(&text.to_string()).into_owned())
    }
}

/// A moment, for `<time datetime="{iso}">{text}</time>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// RFC 3339, for the `datetime` attribute.
    pub(crate) iso: String,
    /// `2026-12-01 20:21:05 UTC`.
    pub(crate) text: String,
}

impl Stamp {
    pub(crate) fn of(at: DateTime<Utc>) -> Stamp {
        Stamp {
            iso: at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            text: at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        }
    }
}

/// How long ago `then` was at `now`, to the two largest units: `12 s`, `4 min`, `2 h 5 min`,
/// `3 d 4 h` (`0 s` for a moment in the future).
pub(crate) fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds().max(0);
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3_600,
        secs % 3_600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min"),
        (0, _, 0) => format!("{h} h"),
        (0, _, _) => format!("{h} h {m} min"),
        (_, 0, _) => format!("{d} d"),
        _ => format!("{d} d {h} h"),
    }
}

/// The age of the oldest pending delivery, or `none` when nothing is pending.
pub(crate) fn oldest(now: DateTime<Utc>, oldest: Option<DateTime<Utc>>) -> String {
    oldest.map_or_else(|| "none".to_owned(), |t| age(now, t))
}

/// The first 8 hex digits of an id, for tables (links carry the whole id).
pub(crate) fn short(id: Uuid) -> String {
    let mut s = id.simple().to_string();
    s.truncate(8);
    s
}

/// A size in bytes: `812 B`, `1.5 KiB`, `3.0 MiB`, `1.2 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `body` cut to at most `limit` bytes at a character boundary and to at most `lines` lines,
/// and whether it was cut.
pub(crate) fn cut(body: &str, limit: usize, lines: usize) -> (&str, bool) {
    let mut end = body.len().min(limit);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    if let Some((i, _)) = body[..end].match_indices('\n').nth(lines.saturating_sub(1)) {
        end = i;
    }
    (&body[..end], end < body.len())
}

/// A count with thousands separated: `1,000,000`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A delivery state as the page's `data-state` names it, and in words.
pub(crate) fn state(s: DeliveryState) -> (&'static str, &'static str) {
    match s {
        DeliveryState::Pending => ("pending", "not stored yet"),
        DeliveryState::Stored => ("stored", "waiting"),
        DeliveryState::HandedOut => ("handed_out", "fetched"),
        DeliveryState::Confirmed => ("confirmed", "confirmed"),
        DeliveryState::Acknowledged => ("acknowledged", "read"),
    }
}

/// Why a message shows no body, in words.
pub(crate) fn absence(a: Absence) -> &'static str {
    match a {
        Absence::Pending => "The body is on its way to its store.",
        Absence::Failed => "The body could not be stored.",
        Absence::Retained => "Retention removed the body.",
        Absence::Unavailable => "The body's store did not answer.",
        Absence::Missing => "The body's store no longer holds it.",
    }
}

/// The members of a team by id: name and kind (from the team's agent list).
#[derive(Debug, Clone, Default)]
pub(crate) struct Names(HashMap<Uuid, (String, AgentKind)>);

impl Names {
    pub(crate) fn of(agents: &[AgentActivity]) -> Names {
        Names(
            agents
                .iter()
                .map(|a| (a.agent.id, (a.agent.name.clone(), a.agent.kind)))
                .collect(),
        )
    }

    /// Whether every sender and recipient of `messages` is known.
    pub(crate) fn knows_all(&self, messages: &[AdminMessage]) -> bool {
        messages.iter().all(|m| {
            self.0.contains_key(&m.entry.message.sender)
                && m.recipients
                    .iter()
                    .all(|r| self.0.contains_key(&r.receipt.recipient))
        })
    }

    /// Whether `agent` is known.
    pub(crate) fn knows(&self, agent: Uuid) -> bool {
        self.0.contains_key(&agent)
    }

    /// The name of `agent` (its id when unknown).
    pub(crate) fn name(&self, agent: Uuid) -> String {
        self.0
            .get(&agent)
            .map_or_else(|| agent.to_string(), |(n, _)| n.clone())
    }
}

/// One recipient's copy of a message, as a page shows it.
#[derive(Debug, Clone)]
pub(crate) struct ReceiptView {
    /// The recipient's name.
    pub(crate) name: String,
    /// `data-state`: `pending`, `stored`, `handed_out`, `confirmed`, `acknowledged`.
    pub(crate) state: &'static str,
    /// The state in words.
    pub(crate) label: &'static str,
    /// When the body was stored for it, fetched last, confirmed, read.
    pub(crate) stored: Option<Stamp>,
    pub(crate) handed_out: Option<Stamp>,
    pub(crate) delivered: Option<Stamp>,
    pub(crate) acknowledged: Option<Stamp>,
    /// Hand-outs so far.
    pub(crate) hand_outs: u32,
}

impl ReceiptView {
    fn of(r: &RecipientState, names: &Names) -> ReceiptView {
        let (state, label) = state(r.state());
        ReceiptView {
            name: names.name(r.receipt.recipient),
            state,
            label,
            stored: r.receipt.stored_at.map(Stamp::of),
            handed_out: r.last_handed_out_at.map(Stamp::of),
            delivered: r.receipt.delivered_at.map(Stamp::of),
            acknowledged: r.receipt.acknowledged_at.map(Stamp::of),
            hand_outs: r.hand_outs,
        }
    }
}

/// One message as the conversation and message pages show it.
#[derive(Debug, Clone)]
pub(crate) struct MessageView {
    pub(crate) id: Uuid,
    pub(crate) seq: u64,
    pub(crate) conversation: Uuid,
    /// The sender's name.
    pub(crate) sender: String,
    /// Sent by a team's human member (an operator in the console).
    pub(crate) human: bool,
    pub(crate) sent: Stamp,
    pub(crate) stored: Option<Stamp>,
    /// The body as shown (cut on the conversation page), `None` when there is none.
    pub(crate) body: Option<String>,
    /// Whether `body` was cut.
    pub(crate) cut: bool,
    /// The body's whole size.
    pub(crate) size: String,
    /// Why there is no body.
    pub(crate) absence: Option<&'static str>,
    pub(crate) request_id: String,
    pub(crate) sha256: String,
    pub(crate) backend: String,
    pub(crate) receipts: Vec<ReceiptView>,
    /// The message page.
    pub(crate) href: String,
}

impl MessageView {
    /// `m` as a page shows it; its body cut (at [`BODY_CUT_BYTES`] and [`BODY_CUT_LINES`]) when
    /// `cut_body`.
    pub(crate) fn of(m: &AdminMessage, names: &Names, cut_body: bool) -> MessageView {
        let msg = &m.entry.message;
        let (body, was_cut) = match &m.entry.body {
            Some(b) => {
                let (shown, was_cut) = if cut_body {
                    cut(b, BODY_CUT_BYTES, BODY_CUT_LINES)
                } else {
                    (b.as_str(), false)
                };
                (Some(shown.to_owned()), was_cut)
            }
            None => (None, false),
        };
        MessageView {
            id: msg.id,
            seq: msg.seq,
            conversation: msg.conversation,
            sender: names.name(msg.sender),
            human: msg.sender_kind == AgentKind::Human,
            sent: Stamp::of(msg.sent_at),
            stored: msg.stored_at.map(Stamp::of),
            body,
            cut: was_cut,
            size: bytes(msg.body_len),
            absence: match (&m.entry.body, m.entry.absence) {
                (None, Some(a)) => Some(absence(a)),
                (None, None) => Some("No body."),
                (Some(_), _) => None,
            },
            request_id: msg.request_id.clone(),
            sha256: msg.body_sha256.clone(),
            backend: msg.backend.clone(),
            receipts: m
                .recipients
                .iter()
                .map(|r| ReceiptView::of(r, names))
                .collect(),
            href: format!("/console/teams/{}/messages/{}", msg.team, msg.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn bidirectional_controls_are_shown_and_other_text_kept() {
        assert!(matches!(
            inert("plain, שלום, 😀"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(inert("report \u{202E}gnp.exe"), "report [U+202E]gnp.exe");
        let every: String = ('\u{202A}'..='\u{202E}')
            .chain('\u{2066}'..='\u{2069}')
            .collect();
        assert_eq!(
            inert(&every),
            "[U+202A][U+202B][U+202C][U+202D][U+202E][U+2066][U+2067][U+2068][U+2069]"
        );
        // Marks and joiners that right-to-left text and emoji need stay as written.
        let kept = "\u{200E}a\u{200F}b\u{200D}c\u{200C}";
        assert_eq!(inert(kept), kept);
    }

    #[test]
    fn ages_read_in_their_two_largest_units() {
        let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
        let at = |s: i64| t + chrono::Duration::seconds(s);
        assert_eq!(age(at(0), t), "0 s");
        assert_eq!(age(at(59), t), "59 s");
        assert_eq!(age(at(61), t), "1 min");
        assert_eq!(age(at(3600), t), "1 h");
        assert_eq!(age(at(3600 + 5 * 60 + 3), t), "1 h 5 min");
        assert_eq!(age(at(86_400 + 7200), t), "1 d 2 h");
        assert_eq!(age(at(2 * 86_400 + 60), t), "2 d");
        assert_eq!(age(t, at(30)), "0 s");
        assert_eq!(oldest(t, None), "none");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(1 << 30), "1.0 GiB");
    }

    #[test]
    fn bodies_are_cut_at_a_character_boundary_or_a_line() {
        assert_eq!(cut("short", 2048, 24), ("short", false));
        let long = "é".repeat(1500); // 3000 bytes
        let (shown, was_cut) = cut(&long, BODY_CUT_BYTES, BODY_CUT_LINES);
        assert!(was_cut);
        assert_eq!(shown.len(), 2048);
        let odd = format!("a{long}");
        let (shown, _) = cut(&odd, BODY_CUT_BYTES, BODY_CUT_LINES);
        assert_eq!(shown.len(), 2047, "the 2048th byte is inside an é");
        let lines = "one\ntwo\nthree\n";
        assert_eq!(cut(lines, 2048, 2), ("one\ntwo", true));
        assert_eq!(cut(lines, 2048, 3), ("one\ntwo\nthree", true));
        assert_eq!(cut("one\ntwo", 2048, 2), ("one\ntwo", false));
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_000_000), "1,000,000");
        assert_eq!(count(12_345_678), "12,345,678");
    }
}
