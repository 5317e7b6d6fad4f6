//! The inbox watch's cursor: what a watcher has been told of, kept by the client between calls.
//!
//! A cursor is built from ledger facts only (messages' ids and `stored_at`), so it is valid on
//! any server that shares the ledger and unchanged by restarts. It holds the caller's team and
//! agent (a cursor is refused for anyone else), a **floor** (every message stored at or before
//! it counts as reported) and the **ids** of the messages reported that were stored after the
//! floor, each with its `stored_at` as an offset from the floor.
//!
//! # Why a floor and ids, not a high-water mark
//! `stored_at` is the storing caller's clock reading, and stores commit out of order: a message
//! stamped before one already reported may become visible after it (a slower transaction,
//! another server). A plain "stored after the newest reported" mark would lose it. So the floor
//! stays [`CURSOR_SKEW`] below the newest reported `stored_at`, and what was reported inside
//! that window is listed by id. The floor also stays below the oldest message held by a live
//! hand-out that was never reported ([`WatchCursor::record`]'s `oldest_held`), so such a message
//! is news once its hand-out lapses.
//!
//! # Bounds
//! At most [`MAX_CURSOR_IDS`] ids: when a report would list more, the floor is raised to the
//! `stored_at` of the newest id dropped, the oldest ones going first. The text is then at most
//! [`MAX_CURSOR_CHARS`] characters. What the bound may cost: a message never reported that was
//! stored at or before the raised floor (a hand-out holding it, or a commit later than the
//! window) is not news — it stays pending (the `pending` count, any fetch).
//!
//! # Wire form (version 1)
//! base64url without padding of: `1` (version), team (16 bytes), agent (16), a flag byte (1
//! with a floor, 0 without), with a floor its seconds since the Unix epoch (i64, big-endian)
//! and nanoseconds (u32), the id count (u16), then per id the UUID (16) and its offset from the
//! floor in nanoseconds (u64, at least 1). Opaque to clients: only this module reads it.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use crate::{BusError, BusResult, Reported};

/// How far below the newest reported `stored_at` a cursor's floor stays (60 s): a message
/// stamped up to this long before one already reported, and committed after it, is still news.
pub const CURSOR_SKEW: Duration = Duration::from_secs(60);

/// The most message ids a cursor lists.
pub const MAX_CURSOR_IDS: usize = 256;

/// The wire form's version byte.
const VERSION: u8 = 1;
/// Version, team, agent, flag.
const HEAD: usize = 1 + 16 + 16 + 1;
/// A floor's seconds and nanoseconds.
const FLOOR: usize = 8 + 4;
/// The id count.
const COUNT: usize = 2;
/// One id and its offset.
const ENTRY: usize = 16 + 8;
/// The longest wire form, in bytes.
const MAX_BYTES: usize = HEAD + FLOOR + COUNT + MAX_CURSOR_IDS * ENTRY;

/// The longest cursor text, in characters (base64url without padding of the longest wire
/// form: 8,256).
pub const MAX_CURSOR_CHARS: usize = (MAX_BYTES * 4).div_ceil(3);

/// The shortest cursor text, in characters (no floor, no id: 48).
pub const MIN_CURSOR_CHARS: usize = ((HEAD + COUNT) * 4).div_ceil(3);

/// A watcher's cursor (see the module docs): bound to one agent of one team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchCursor {
    team: Uuid,
    agent: Uuid,
    floor: Option<DateTime<Utc>>,
    /// Reported ids stored after the floor, with their `stored_at`, oldest first (then id).
    ids: Vec<(Uuid, DateTime<Utc>)>,
}

impl WatchCursor {
    /// A cursor of `agent` of `team` that records nothing reported (every pending message is
    /// news).
    pub fn new(team: Uuid, agent: Uuid) -> Self {
        WatchCursor {
            team,
            agent,
            floor: None,
            ids: Vec::new(),
        }
    }

    /// The cursor `text` encodes, which must be `agent`'s of `team`.
    ///
    /// Errors (`Invalid`): longer than [`MAX_CURSOR_CHARS`], not base64url, an unknown version,
    /// a malformed or out-of-range content, or a cursor of another agent or team.
    pub fn decode(text: &str, team: Uuid, agent: Uuid) -> BusResult<Self> {
        let bad = || {
            BusError::invalid("after: not a watch cursor (pass back the cursor a watch answered)")
        };
        if text.len() > MAX_CURSOR_CHARS {
            return Err(bad());
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
        let mut r = Reader(&bytes);
        if r.take::<1>().ok_or_else(bad)? != [VERSION] {
            return Err(bad());
        }
        let owner_team = Uuid::from_bytes(r.take().ok_or_else(bad)?);
        let owner_agent = Uuid::from_bytes(r.take().ok_or_else(bad)?);
        let floor = match r.take::<1>().ok_or_else(bad)? {
            [0] => None,
            [1] => {
                let secs = i64::from_be_bytes(r.take().ok_or_else(bad)?);
                let nanos = u32::from_be_bytes(r.take().ok_or_else(bad)?);
                Some(DateTime::from_timestamp(secs, nanos).ok_or_else(bad)?)
            }
            _ => return Err(bad()),
        };
        let count = usize::from(u16::from_be_bytes(r.take().ok_or_else(bad)?));
        if count > MAX_CURSOR_IDS || r.0.len() != count * ENTRY || (floor.is_none() && count > 0) {
            return Err(bad());
        }
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            let id = Uuid::from_bytes(r.take().ok_or_else(bad)?);
            let offset = u64::from_be_bytes(r.take().ok_or_else(bad)?);
            let at = floor
                .zip(i64::try_from(offset).ok().filter(|o| *o > 0))
                .and_then(|(f, o)| f.checked_add_signed(TimeDelta::nanoseconds(o)))
                .ok_or_else(bad)?;
            ids.push((id, at));
        }
        let mut distinct: Vec<Uuid> = ids.iter().map(|(id, _)| *id).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != ids.len() {
            return Err(bad());
        }
        if (owner_team, owner_agent) != (team, agent) {
            return Err(BusError::invalid(
                "after: this cursor is another agent's (a cursor is valid for the agent it was \
                 answered to)",
            ));
        }
        ids.sort_by_key(|(id, at)| (*at, *id));
        Ok(WatchCursor {
            team,
            agent,
            floor,
            ids,
        })
    }

    /// The wire form (see the module docs): at most [`MAX_CURSOR_CHARS`] characters of
    /// base64url.
    pub fn encode(&self) -> String {
        let mut out = Vec::with_capacity(HEAD + FLOOR + COUNT + self.ids.len() * ENTRY);
        out.push(VERSION);
        out.extend_from_slice(self.team.as_bytes());
        out.extend_from_slice(self.agent.as_bytes());
        match self.floor {
            None => out.push(0),
            Some(f) => {
                out.push(1);
                out.extend_from_slice(&f.timestamp().to_be_bytes());
                out.extend_from_slice(&f.timestamp_subsec_nanos().to_be_bytes());
            }
        }
        // At most MAX_CURSOR_IDS (256) ids: a u16.
        out.extend_from_slice(&(self.ids.len() as u16).to_be_bytes());
        for (id, at) in &self.ids {
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&offset_nanos(self.floor, *at).to_be_bytes());
        }
        URL_SAFE_NO_PAD.encode(out)
    }

    /// What the cursor counts as reported, for `Ledger::inbox_news`.
    pub fn reported(&self) -> Reported {
        Reported {
            floor: self.floor,
            ids: self.ids.iter().map(|(id, _)| *id).collect(),
        }
    }

    /// Whether the message `id` stored at `stored_at` counts as reported.
    pub fn covers(&self, id: Uuid, stored_at: DateTime<Utc>) -> bool {
        self.floor.is_some_and(|f| stored_at <= f) || self.ids.iter().any(|(i, _)| *i == id)
    }

    /// The floor: every message stored at or before it counts as reported (`None`: none does).
    pub fn floor(&self) -> Option<DateTime<Utc>> {
        self.floor
    }

    /// How many ids the cursor lists (at most [`MAX_CURSOR_IDS`]).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the cursor lists no id.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The newest `stored_at` the cursor records as reported (the floor when it lists no id;
    /// `None` when nothing was reported): a waiting watcher needs waking only for a message
    /// stored after it (the safety sweep's `stored_after`).
    pub fn newest(&self) -> Option<DateTime<Utc>> {
        self.ids.last().map(|(_, at)| *at).max(self.floor)
    }

    /// Records `news` (each message's id and `stored_at`) as reported.
    ///
    /// The floor becomes the greatest of: the floor before; and the least of the newest
    /// reported `stored_at` minus [`CURSOR_SKEW`] and just before `oldest_held` (the oldest
    /// `stored_at` of a message held by a live hand-out and never reported, as
    /// `Ledger::inbox_news` answers it). Ids stored at or before the floor are dropped (the
    /// floor covers them); above [`MAX_CURSOR_IDS`], the floor is raised to drop the oldest.
    /// Every message reported so far stays covered ([`WatchCursor::covers`]); the floor never
    /// goes down. No news: nothing changes.
    pub fn record(&mut self, news: &[(Uuid, DateTime<Utc>)], oldest_held: Option<DateTime<Utc>>) {
        let Some(newest) = news.iter().map(|(_, at)| *at).max() else {
            return;
        };
        let newest = newest.max(self.newest().unwrap_or(newest));
        let skew = TimeDelta::from_std(CURSOR_SKEW).expect("60 s is a TimeDelta");
        let mut floor = newest
            .checked_sub_signed(skew)
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        if let Some(held) = oldest_held {
            let below = held
                .checked_sub_signed(TimeDelta::nanoseconds(1))
                .unwrap_or(DateTime::<Utc>::MIN_UTC);
            floor = floor.min(below);
        }
        if let Some(before) = self.floor {
            floor = floor.max(before);
        }
        let mut by_id: HashMap<Uuid, DateTime<Utc>> = self.ids.iter().copied().collect();
        for (id, at) in news {
            let kept = by_id.entry(*id).or_insert(*at);
            *kept = (*kept).max(*at);
        }
        let mut ids: Vec<(Uuid, DateTime<Utc>)> =
            by_id.into_iter().filter(|(_, at)| *at > floor).collect();
        ids.sort_by_key(|(id, at)| (*at, *id));
        if ids.len() > MAX_CURSOR_IDS {
            let dropped = ids.len() - MAX_CURSOR_IDS;
            floor = ids[dropped - 1].1;
            ids.drain(..dropped);
            // Ids stored at the same instant as the newest dropped one are covered too.
            ids.retain(|(_, at)| *at > floor);
        }
        self.floor = Some(floor);
        self.ids = ids;
    }
}

/// `at` − `floor` in nanoseconds (at least 1: ids are kept only when stored after the floor).
fn offset_nanos(floor: Option<DateTime<Utc>>, at: DateTime<Utc>) -> u64 {
    floor
        .and_then(|f| (at - f).num_nanoseconds())
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(1)
        .max(1)
}

/// Reads fixed-size fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
            .single()
            .expect("an instant")
    }

    fn at_ms(ms: i64) -> DateTime<Utc> {
        t0() + TimeDelta::milliseconds(ms)
    }

    /// One report: `n` messages stored around a clock that moves on by `step_ms`, each up to
    /// `jitter_ms` before it (commits out of order), some at the same instant (a send batch).
    fn reports() -> impl Strategy<Value = Vec<Vec<(u8, i64)>>> {
        prop::collection::vec(prop::collection::vec((0u8..4, 0i64..90_000), 0..=20), 1..40)
    }

    proptest! {
        /// However reports come, a cursor stays within its bounds, round-trips, never lowers
        /// its floor, and covers every message it ever reported.
        #[test]
        fn a_sequence_of_reports_stays_bounded_and_covers_what_it_reported(
            batches in reports(),
            step_ms in 0i64..120_000,
            held in prop::option::of(0i64..600_000),
        ) {
            let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
            let mut cursor = WatchCursor::new(team, agent);
            let mut reported: Vec<(Uuid, DateTime<Utc>)> = Vec::new();
            let mut clock = 0i64;
            for batch in batches {
                clock += step_ms;
                let news: Vec<(Uuid, DateTime<Utc>)> = batch
                    .iter()
                    .map(|(same, jitter)| {
                        let ms = if *same == 0 { clock } else { clock - jitter };
                        (Uuid::new_v4(), at_ms(ms))
                    })
                    .collect();
                let floor_before = cursor.floor();
                cursor.record(&news, held.map(at_ms));
                reported.extend(&news);
                prop_assert!(cursor.len() <= MAX_CURSOR_IDS);
                let text = cursor.encode();
                prop_assert!(text.len() <= MAX_CURSOR_CHARS);
                prop_assert_eq!(&WatchCursor::decode(&text, team, agent).unwrap(), &cursor);
                prop_assert!(cursor.floor() >= floor_before, "the floor never goes down");
                for (id, at) in &reported {
                    prop_assert!(cursor.covers(*id, *at), "a reported message is never news again");
                }
                prop_assert_eq!(cursor.reported().ids.len(), cursor.len());
            }
        }

        /// While the ids stay within their bound, a message never reported is not covered when
        /// stored after both the skew window's floor and just before the oldest held message.
        #[test]
        fn a_message_never_reported_after_the_floor_stays_news(
            batch in prop::collection::vec(0i64..120_000, 1..=20),
            held_ms in 0i64..200_000,
        ) {
            let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
            let mut cursor = WatchCursor::new(team, agent);
            let news: Vec<(Uuid, DateTime<Utc>)> =
                batch.iter().map(|ms| (Uuid::new_v4(), at_ms(*ms))).collect();
            cursor.record(&news, Some(at_ms(held_ms)));
            let held = Uuid::new_v4();
            prop_assert!(!cursor.covers(held, at_ms(held_ms)), "the held message is news once it lapses");
            let newest = batch.iter().copied().max().unwrap();
            let late = Uuid::new_v4();
            prop_assert!(
                !cursor.covers(late, at_ms(newest - 59_999)),
                "a message stored inside the skew window and never reported is news"
            );
        }

        /// Any text that is not a cursor of the caller is refused as `Invalid`, never a panic.
        #[test]
        fn garbage_is_refused(text in ".{0,200}") {
            let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
            let refused = matches!(
                WatchCursor::decode(&text, team, agent),
                Err(BusError::Invalid { .. })
            );
            prop_assert!(refused);
        }

        /// Cut or altered wire forms are refused (or, altered in an id or offset, decode to
        /// another valid cursor of the same agent: never a panic).
        #[test]
        fn altered_cursors_are_refused_or_stay_the_agents(cut in 0usize..200, flip in 0usize..200) {
            let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
            let mut cursor = WatchCursor::new(team, agent);
            cursor.record(&[(Uuid::new_v4(), at_ms(1)), (Uuid::new_v4(), at_ms(2))], None);
            let bytes = URL_SAFE_NO_PAD.decode(cursor.encode()).unwrap();
            let short = URL_SAFE_NO_PAD.encode(&bytes[..cut.min(bytes.len() - 1)]);
            prop_assert!(WatchCursor::decode(&short, team, agent).is_err());
            let mut flipped = bytes.clone();
            let i = flip % flipped.len();
            flipped[i] ^= 0x80;
            if let Ok(other) = WatchCursor::decode(&URL_SAFE_NO_PAD.encode(&flipped), team, agent) {
                prop_assert_eq!((other.team, other.agent), (team, agent));
            }
        }
    }

    #[test]
    fn another_agents_or_teams_cursor_is_refused() {
        let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
        let mut cursor = WatchCursor::new(team, agent);
        cursor.record(&[(Uuid::new_v4(), at_ms(1))], None);
        let text = cursor.encode();
        assert!(WatchCursor::decode(&text, team, agent).is_ok());
        for (t, a) in [(team, Uuid::new_v4()), (Uuid::new_v4(), agent)] {
            assert!(matches!(
                WatchCursor::decode(&text, t, a),
                Err(BusError::Invalid { .. })
            ));
        }
        let empty = WatchCursor::new(team, agent).encode();
        assert!(matches!(
            WatchCursor::decode(&empty, team, Uuid::new_v4()),
            Err(BusError::Invalid { .. })
        ));
        let too_long = "A".repeat(MAX_CURSOR_CHARS + 1);
        assert!(matches!(
            WatchCursor::decode(&too_long, team, agent),
            Err(BusError::Invalid { .. })
        ));
    }

    #[test]
    fn the_floor_trails_the_newest_by_the_skew_and_stays_below_a_held_message() {
        let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
        let mut cursor = WatchCursor::new(team, agent);
        assert_eq!(cursor.newest(), None);
        cursor.record(&[], None);
        assert_eq!(cursor, WatchCursor::new(team, agent), "no news: unchanged");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        cursor.record(&[(a, at_ms(0)), (b, at_ms(100_000))], None);
        assert_eq!(cursor.floor(), Some(at_ms(40_000)));
        assert_eq!(cursor.reported().ids, vec![b], "a is under the floor");
        assert_eq!(cursor.newest(), Some(at_ms(100_000)));
        let c = Uuid::new_v4();
        cursor.record(&[(c, at_ms(200_000))], Some(at_ms(130_000)));
        assert_eq!(
            cursor.floor(),
            Some(at_ms(130_000) - TimeDelta::nanoseconds(1)),
            "held at 130 s: the floor stays just below it (not at 140 s)"
        );
        assert!(cursor.covers(b, at_ms(100_000)) && cursor.covers(c, at_ms(200_000)));
        assert!(!cursor.covers(Uuid::new_v4(), at_ms(130_000)));
        cursor.record(&[(Uuid::new_v4(), at_ms(300_000))], None);
        assert_eq!(
            cursor.floor(),
            Some(at_ms(240_000)),
            "nothing held: the skew again"
        );
    }

    #[test]
    fn over_the_bound_the_oldest_ids_go_under_a_raised_floor() {
        let (team, agent) = (Uuid::new_v4(), Uuid::new_v4());
        let mut cursor = WatchCursor::new(team, agent);
        let news: Vec<(Uuid, DateTime<Utc>)> = (0..MAX_CURSOR_IDS as i64 + 10)
            .map(|i| (Uuid::new_v4(), at_ms(i)))
            .collect();
        cursor.record(&news, None);
        assert_eq!(cursor.len(), MAX_CURSOR_IDS);
        assert_eq!(cursor.floor(), Some(at_ms(9)));
        assert!(news.iter().all(|(id, at)| cursor.covers(*id, *at)));
        assert!(cursor.encode().len() <= MAX_CURSOR_CHARS);
        assert_eq!(MAX_CURSOR_CHARS, 8256);
        assert_eq!(
            WatchCursor::new(team, agent).encode().len(),
            MIN_CURSOR_CHARS
        );
        assert_eq!(MIN_CURSOR_CHARS, 48);
    }
}
