//! Conversation parts rendered once for every live viewer of the same window.
//!
//! Twenty viewers of a busy conversation are each woken by the same feed events; rendering the
//! part once per viewer would read the same 50 messages, their receipts and bodies twenty times
//! per [`CONVERSATION_INTERVAL`](super::events::CONVERSATION_INTERVAL). A viewer woken at
//! instant `t` needs a render that *started* at `t` or later (every event reaches the feed after
//! its commit, so such a render reads what the event announced); it reuses the latest render of
//! its (team, conversation, window) when that one did, and otherwise renders it for everyone,
//! the others waiting on the slot meanwhile. What a render reads does not depend on the viewer
//! beyond the team being in its scope, which every viewer's own scope is checked against before
//! a shared part is handed to it. A failed render is never shared.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crewbus_domain::{OperatorScope, Uuid};
use tokio::time::Instant;

use super::conversation::{Window, messages_part};
use super::events::LivePart;
use super::failure::Failed;
use super::views::Names;
use crate::bus::Bus;

/// Slots not used for this long are dropped once the table holds more than [`KEEP`].
const UNUSED: Duration = Duration::from_secs(60);
const KEEP: usize = 256;

type Key = (Uuid, Uuid, Window);

/// The latest render of one window.
#[derive(Default)]
struct Slot {
    /// When the render began, and what it produced.
    latest: Option<(Instant, Arc<LivePart>)>,
    /// The agents' names, kept between renders.
    names: Names,
    used: Option<Instant>,
}

/// The shared renders of one console.
#[derive(Default)]
pub(crate) struct SharedRenders {
    slots: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl SharedRenders {
    fn slot(&self, key: Key) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().expect("shared renders");
        if slots.len() > KEEP {
            let now = Instant::now();
            slots.retain(|_, s| {
                Arc::strong_count(s) > 1
                    || s.try_lock()
                        .map_or(true, |s| s.used.is_some_and(|u| now - u < UNUSED))
            });
        }
        Arc::clone(slots.entry(key).or_default())
    }

    /// The conversation's messages part as of `fresh_after` or later (with the messages it
    /// shows and its `swap` event, encoded once): the latest shared render when it began at or
    /// after `fresh_after`, else a new one. Errors: [`messages_part`]'s (`NotFound` when the
    /// team is outside `scope`).
    pub(crate) async fn conversation(
        &self,
        bus: &Bus,
        scope: &OperatorScope,
        team: Uuid,
        conversation: Uuid,
        window: Window,
        fresh_after: Instant,
    ) -> Result<Arc<LivePart>, Failed> {
        if !scope.covers(team) {
            let mut names = Names::default();
            let (part, shown) =
                messages_part(bus, scope, team, conversation, window, &mut names).await?;
            return Ok(Arc::new(LivePart::new(part, shown)));
        }
        let slot = self.slot((team, conversation, window));
        let mut slot = slot.lock().await;
        slot.used = Some(Instant::now());
        if let Some((began, part)) = &slot.latest
            && *began >= fresh_after
        {
            return Ok(Arc::clone(part));
        }
        let began = Instant::now();
        let mut names = std::mem::take(&mut slot.names);
        let rendered = messages_part(bus, scope, team, conversation, window, &mut names).await;
        slot.names = names;
        match rendered {
            Ok((part, shown)) => {
                let part = Arc::new(LivePart::new(part, shown));
                slot.latest = Some((began, Arc::clone(&part)));
                Ok(part)
            }
            Err(e) => {
                slot.latest = None;
                Err(e)
            }
        }
    }
}
