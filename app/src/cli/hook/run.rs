//! Each event's flow: read the event, watch, record what is reported, print.
//!
//! - A **check** (SessionStart, UserPromptSubmit, PostToolUse) asks without waiting, within
//!   [`CHECK_BUDGET`], and prints `additionalContext` only when there is news not yet reported.
//! - A **blocking stop** (Claude Code `--headless`, Codex's Stop, Cursor's stop) watches up to
//!   `--wait` and prints the host's decision when news comes.
//! - The **background stop** (Claude Code without `--headless`, installed with `asyncRewake`)
//!   watches up to `--wait` in requests of at most [`MAX_WAIT`] (each clamped by the server to
//!   its `bus.max_wait_ms`); with news it prints the summary on stderr and exits 2. A later
//!   background stop of the same session supersedes it: the older one gives way at its next
//!   request.
//!
//! Never a loop: the cursor moves only when the hook reports (under the state lock, and only
//! if nobody reported meanwhile: else the watch is asked again with the newer cursor), so what
//! was reported never wakes again; consecutive wakes stop at `--max-wakes`. The stored cursor
//! is dropped only when the server refuses it as not this agent's ([`Watcher`]); the watch
//! asks for no previews (the hook prints no body text). A state file the hook does not believe
//! is reported on stderr once, and the hook goes on from a fresh state.

use std::cell::RefCell;
use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::event::{self, CheckEvent, Event, EventKind};
use super::report;
use super::state::{self, Locked, PRUNE_AFTER, SessionState, StateDir};
use super::{HookArgs, Host};
use crate::cli::watch_client::{MAX_WAIT, WatchAnswer, WatchClient, Watcher};

/// How long a check's work may take (connecting and the watch): 270 ms, so that with the
/// process's start and exit (about 15 ms) the host has its answer within the 300 ms.
pub const CHECK_BUDGET: Duration = Duration::from_millis(270);

/// How long the event on stdin may take to arrive.
const STDIN_WAIT: Duration = Duration::from_secs(2);

/// Added to a request's wait for its whole round trip.
const GRACE: Duration = Duration::from_millis(1500);

/// Reports a failure: one line on stderr (errors writing it are ignored).
pub fn fail(reason: &str) {
    let _ = writeln!(std::io::stderr().lock(), "crewbus hook: {reason}");
}

/// What the hook does when it is done.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Exit 0 with nothing on stdout (Cursor: `{}`).
    Quiet,
    /// Exit 0 with one line on stdout.
    Print(String),
    /// Claude Code's background wake: the summary on stderr, exit 2.
    Wake(String),
}

/// Runs the hook to its end (see the module documentation); never panics through.
pub fn main(args: HookArgs) -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        fail(&format!("internal error{at}"));
    }));
    let host = args.host;
    let outcome = std::panic::catch_unwind(move || run(args)).unwrap_or(Outcome::Quiet);
    match outcome {
        Outcome::Quiet => {
            if host == Host::Cursor {
                let _ = writeln!(std::io::stdout().lock(), "{}", report::cursor_answer(None));
            }
            ExitCode::SUCCESS
        }
        Outcome::Print(line) => {
            let _ = writeln!(std::io::stdout().lock(), "{line}");
            ExitCode::SUCCESS
        }
        Outcome::Wake(summary) => {
            let _ = writeln!(std::io::stderr().lock(), "{summary}");
            ExitCode::from(2)
        }
    }
}

fn run(args: HookArgs) -> Outcome {
    match try_run(args) {
        Ok(outcome) => outcome,
        Err(reason) => {
            fail(&reason);
            Outcome::Quiet
        }
    }
}

fn try_run(args: HookArgs) -> Result<Outcome, String> {
    let event = read_event(args.host)?;
    let token = super::token(args.token_file.as_deref())?;
    let connect = match event.kind {
        EventKind::Check(_) => CHECK_BUDGET,
        _ => Duration::from_secs(1),
    };
    let client = WatchClient::new(&args.url, &token, connect)?;
    let dir = StateDir::open(state::default_dir()?)?;
    let key = state::key(&args.url, token.expose(), args.host.name(), &event.session);
    drop(token);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let mut hook = Hook {
        args,
        watcher: Watcher::new(client, false),
        dir,
        key,
        discarded: RefCell::new(None),
    };
    let outcome = runtime.block_on(hook.handle(event));
    let discarded = hook.discarded.take();
    // The host waits for this process's exit, and the exit releases everything the runtime and
    // the hook still hold (the pooled connection, its task, the state directory): neither is
    // torn down first (measured: the teardown came between the news and the decision line).
    std::mem::forget(hook);
    std::mem::forget(runtime);
    match (outcome, discarded) {
        (Err(reason), Some(discarded)) => Err(format!("{reason} (and {discarded})")),
        (outcome, Some(discarded)) => {
            fail(&discarded);
            outcome
        }
        (outcome, None) => outcome,
    }
}

/// The event on stdin: one JSON value, at most [`event::MAX_EVENT_BYTES`], within
/// [`STDIN_WAIT`]. Errors: a message.
fn read_event(host: Host) -> Result<Event, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin().lock().take(event::MAX_EVENT_BYTES as u64);
        let value = serde_json::Deserializer::from_reader(stdin)
            .into_iter::<serde_json::Value>()
            .next();
        let _ = tx.send(value);
    });
    match rx.recv_timeout(STDIN_WAIT) {
        Ok(Some(Ok(v))) => event::from_value(host, &v).map_err(|e| e.to_string()),
        Ok(Some(Err(_))) => Err(event::EventError::Malformed.to_string()),
        Ok(None) => Err("no hook event on stdin (it was empty or blank)".to_owned()),
        Err(_) => Err(format!(
            "no hook event on stdin within {} s",
            STDIN_WAIT.as_secs()
        )),
    }
}

/// One run's context.
struct Hook {
    args: HookArgs,
    /// The watch, without previews.
    watcher: Watcher,
    dir: StateDir,
    key: String,
    /// Why a state file was not believed (the first time in this run): one stderr line at the
    /// end, folded into the failure's when the run fails (a failure is one line).
    discarded: RefCell<Option<String>>,
}

impl Hook {
    async fn handle(&mut self, event: Event) -> Result<Outcome, String> {
        match event.kind {
            EventKind::Check(check) => self.check(check).await,
            EventKind::Stop { stop_hook_active } => {
                let background = self.args.host == Host::ClaudeCode && !self.args.headless;
                self.stop(stop_hook_active, background).await
            }
            EventKind::CursorStop {
                completed,
                loop_count,
            } => {
                if !completed || loop_count >= self.args.max_wakes {
                    return Ok(Outcome::Quiet);
                }
                // Cursor counts its own follow-ups (loop_count): the state keeps the cursor only.
                self.stop(loop_count > 0, false).await
            }
        }
    }

    /// Reads, changes and writes the session's state under the lock; returns the state as
    /// written (or read, when `change` changed nothing).
    fn update(&self, change: impl FnOnce(&mut SessionState)) -> Result<SessionState, String> {
        let lock = self.dir.lock()?;
        let before = self.load(&lock);
        let mut after = before.clone();
        change(&mut after);
        if after != before {
            lock.save(&after)?;
        }
        Ok(after)
    }

    /// Records `answer` as reported when the stored cursor is still `seen` (nobody reported
    /// meanwhile) and, for a background `waiter`, it is still the current one; counts a wake
    /// when `wake`. Returns whether it was recorded.
    fn record(
        &self,
        seen: &Option<String>,
        answer: &WatchAnswer,
        wake: bool,
        waiter: Option<&String>,
    ) -> Result<bool, String> {
        let lock = self.dir.lock()?;
        let mut state = self.load(&lock);
        if state.cursor != *seen || (waiter.is_some() && state.waiter.as_ref() != waiter) {
            return Ok(false);
        }
        state.cursor = Some(answer.cursor.clone());
        if wake {
            state.wakes = state.wakes.saturating_add(1);
            state.waiter = None;
        }
        // The decision follows at once: the write is left to a child holding the lock.
        lock.save_behind(&state)?;
        Ok(true)
    }

    /// A check without waiting: `additionalContext` when there is news not yet reported.
    async fn check(&mut self, check: CheckEvent) -> Result<Outcome, String> {
        let deadline = Instant::now() + CHECK_BUDGET;
        let human = matches!(
            check,
            CheckEvent::SessionStart | CheckEvent::UserPromptSubmit
        );
        let state = self.update(|s| {
            if human {
                // The user spoke (or the session began): consecutive wakes count from zero, and
                // a background Stop still waiting from the last turn gives way.
                s.waiter = None;
                s.wakes = 0;
            }
        })?;
        if check == CheckEvent::SessionStart
            && let Ok(lock) = self.dir.lock()
        {
            lock.prune(PRUNE_AFTER);
        }
        let mut seen = state.cursor;
        for _ in 0..2 {
            let grace = deadline.saturating_duration_since(Instant::now());
            let answer = self.watch(seen.as_deref(), Duration::ZERO, grace).await?;
            if answer.new.is_empty() {
                return Ok(Outcome::Quiet);
            }
            if self.record(&seen, &answer, false, None)? {
                let text = report::summary(&answer);
                return Ok(Outcome::Print(report::additional_context(check, &text)));
            }
            // Another hook of this session reported meanwhile: ask again with its cursor.
            seen = self.current()?.cursor;
        }
        Ok(Outcome::Quiet)
    }

    /// A stop: waits up to `--wait` for news; reports it as a decision (or, `background`, a
    /// wake).
    async fn stop(&mut self, stop_hook_active: bool, background: bool) -> Result<Outcome, String> {
        let max_wakes = self.args.max_wakes;
        let waiter = background.then(|| uuid::Uuid::new_v4().to_string());
        let mut capped = false;
        let state = self.update(|s| {
            if !stop_hook_active {
                s.wakes = 0;
            }
            capped = s.wakes >= max_wakes;
            if !capped && waiter.is_some() {
                s.waiter.clone_from(&waiter);
            }
        })?;
        if capped {
            fail(&format!(
                "{max_wakes} consecutive wakes: letting the session stop (the messages stay \
                 in the inbox; --max-wakes raises the limit)"
            ));
            return Ok(Outcome::Quiet);
        }
        let deadline = Instant::now() + Duration::from_secs(self.args.wait);
        let mut seen = state.cursor;
        loop {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(MAX_WAIT);
            let answer = self.watch(seen.as_deref(), wait, GRACE).await?;
            if !answer.new.is_empty() {
                if self.record(&seen, &answer, true, waiter.as_ref())? {
                    let text = report::summary(&answer);
                    return Ok(match self.args.host {
                        Host::Cursor => Outcome::Print(report::cursor_answer(Some(&text))),
                        _ if background => Outcome::Wake(text),
                        _ => Outcome::Print(report::stop_block(&text)),
                    });
                }
            } else if Instant::now() >= deadline {
                if let Some(w) = &waiter {
                    let _ = self.update(|s| {
                        if s.waiter.as_ref() == Some(w) {
                            s.waiter = None;
                        }
                    });
                }
                return Ok(Outcome::Quiet);
            }
            let now = self.current()?;
            if waiter.is_some() && now.waiter != waiter {
                // A later stop of this session waits instead (or the user moved on).
                return Ok(Outcome::Quiet);
            }
            seen = now.cursor;
        }
    }

    /// One watch after `cursor` (unless the server refused it: then after none, and everything
    /// pending is news again), waiting up to `wait` (clamped by the server); no previews.
    async fn watch(
        &mut self,
        cursor: Option<&str>,
        wait: Duration,
        grace: Duration,
    ) -> Result<WatchAnswer, String> {
        self.watcher
            .watch(cursor, wait, grace)
            .await
            .map(|answered| answered.answer)
            .map_err(|e| e.to_string())
    }

    /// The session's state under `lock`; one the hook does not believe is read as fresh and
    /// reported on stderr at the run's end (once; in the failure's line when the run fails).
    fn load(&self, lock: &Locked<'_>) -> SessionState {
        lock.load(&self.key).unwrap_or_else(|discarded| {
            self.discarded
                .borrow_mut()
                .get_or_insert_with(|| discarded.to_string());
            SessionState::fresh(&self.key)
        })
    }

    /// The session's state now (under the lock for the read).
    fn current(&self) -> Result<SessionState, String> {
        let lock = self.dir.lock()?;
        Ok(self.load(&lock))
    }
}
