//! The tools: each one declared once, as a type implementing [`Tool`] — its name, title,
//! descriptions (full and core profiles), effect, arguments, answer, the wait it may take beyond
//! the request deadline and its run, which calls the same use case as the HTTP handler for the
//! same operation and renders the HTTP view of the answer; no tool holds a rule of its own. The
//! modules below hold them, a group each, with the arguments and answers that are not HTTP types;
//! the catalogue (`mcp/catalogue.rs`, both profiles), the dispatch and the deadline ([`call`])
//! are derived from their list ([`all`]).
//!
//! A tool's answer is `structuredContent` (a JSON object matching the tool's `outputSchema`) and
//! the same data as text; an answer holding message bodies fences them in its text
//! (`mcp/fence.rs`), and under the core profile in its `structuredContent` too, since a host may
//! hand the model either (Claude Code hands it the structured JSON). For the same reason the
//! short strings agents wrote are cleaned in the text, and under core in `structuredContent`
//! too (`mcp/agent_text.rs`); full's `structuredContent` keeps them as stored. A bus error is a
//! tool result with `isError: true` whose text is the HTTP API's error body `{"code",
//! "message"}` (the same rendering: broker and database text never reaches the model). Arguments
//! that do not fit the input schema are such an error too (`invalid`), so a model can correct
//! them; an unknown tool name is a protocol error.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::LazyLock;
use std::time::Duration;

use crewbus_domain::{Agent, BusError, BusResult};
use futures_util::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::ToSchema;

use super::agent_text;
use super::fence::{BODIES_ARE_DATA, Fence, Fenced};
use super::profile::Profile;
use super::schema::schema_of;
use crate::edge::error::error_body;
pub(super) use crate::edge::operation::Effect;
use crate::edge::operation::{Operation, Visit};
use crate::metrics::Metrics;
use crate::usecases::bus::Bus;

pub(super) mod conversations;
pub(super) mod inbox;
pub(super) mod leases;

/// Every tool, in `tools/list`'s order: each group's tools in its own order, the operations
/// declared once for both edges (`crate::edge::operations`) among them.
static ALL: LazyLock<Vec<Declared>> = LazyLock::new(|| {
    use crate::edge::operations as declared;
    let mut tools = Tools(Vec::new());
    declared::team::each(&mut tools);
    for group in [conversations::TOOLS, inbox::TOOLS] {
        tools.0.extend_from_slice(group);
    }
    declared::runs::each(&mut tools);
    tools.0.extend_from_slice(leases::TOOLS);
    declared::search::each(&mut tools);
    declared::presence::each(&mut tools);
    tools.0
});

/// Collects the declared operations as tools.
struct Tools(Vec<Declared>);

impl Visit for Tools {
    fn operation<O: Operation>(&mut self) {
        self.0.push(declare::<Declaring<O>>());
    }
}

/// An operation declared once for both edges, as a tool: its run runs the use case with the
/// tool's arguments and answers its answer as [`Operation::McpAnswer`].
struct Declaring<O>(PhantomData<O>);

impl<O: Operation> Tool for Declaring<O> {
    const NAME: &'static str = O::NAME;
    const TITLE: &'static str = O::TITLE;
    const DESCRIPTION: &'static str = O::DESCRIPTION;
    const CORE: Option<&'static str> = O::CORE;
    const EFFECT: Effect = O::EFFECT;
    type Arguments = O::Mcp;
    type Answer = O::McpAnswer;

    async fn run(call: Call<'_>, arguments: O::Mcp) -> BusResult<Reply<O::McpAnswer>> {
        let answer = O::run(call.bus, call.agent, arguments).await?;
        reply(O::McpAnswer::from(answer))
    }
}

/// One agent operation as an MCP tool, declared once: everything the catalogue lists of it, its
/// arguments and answer, and its run.
pub(super) trait Tool: 'static {
    /// Its name, as hosts call it.
    const NAME: &'static str;
    /// Its title.
    const TITLE: &'static str;
    /// Its description under the full profile, written for a model that also sees the output
    /// schema.
    const DESCRIPTION: &'static str;
    /// Its description under the core profile, for a tool core lists (`None`: not in core).
    /// Written for a model that sees no output schema: it names the answer's main fields.
    const CORE: Option<&'static str>;
    /// What it does to the bus (its annotations).
    const EFFECT: Effect;
    /// Its arguments: the input schema, and what a call's arguments are parsed into.
    type Arguments: DeserializeOwned + ToSchema + Send + 'static;
    /// Its answer: the output schema, and what [`Tool::run`] answers.
    type Answer: Serialize + ToSchema;

    /// How long the call may take beyond the request deadline (`bus.request_timeout_ms`): a
    /// wait the arguments ask for.
    fn extra_wait(_arguments: &Self::Arguments) -> Duration {
        Duration::ZERO
    }

    /// Runs the tool for the caller.
    fn run(
        call: Call<'_>,
        arguments: Self::Arguments,
    ) -> impl Future<Output = BusResult<Reply<Self::Answer>>> + Send;
}

/// Who calls a tool, on which bus, in which profile.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub(super) bus: &'a Bus,
    pub(super) agent: &'a Agent,
    pub(super) profile: Profile,
}

/// A [`Tool`] as the list holds it: what the catalogue shows, and its call.
#[derive(Clone, Copy)]
pub(super) struct Declared {
    pub(super) name: &'static str,
    pub(super) title: &'static str,
    pub(super) description: &'static str,
    pub(super) core: Option<&'static str>,
    pub(super) effect: Effect,
    /// The schema of its arguments, as generated (`mcp/schema.rs`).
    pub(super) input: fn() -> JsonObject,
    /// The schema of its answer, as generated.
    pub(super) output: fn() -> JsonObject,
    call: fn(Bus, Agent, Profile, JsonObject) -> BoxFuture<'static, BusResult<Answer>>,
}

/// `T` as the list holds it.
pub(super) const fn declare<T: Tool>() -> Declared {
    Declared {
        name: T::NAME,
        title: T::TITLE,
        description: T::DESCRIPTION,
        core: T::CORE,
        effect: T::EFFECT,
        input: schema_of::<T::Arguments>,
        output: schema_of::<T::Answer>,
        call: call_as::<T>,
    }
}

/// Every tool, in `tools/list`'s order.
pub(super) fn all() -> impl Iterator<Item = &'static Declared> {
    ALL.iter()
}

/// Runs tool `name` for `agent` with `arguments`, answering in the request's `profile` (core:
/// bodies fenced and agent-written strings cleaned in `structuredContent` too). `None` when there
/// is no such tool (a protocol error for the caller to raise); otherwise the result,
/// `isError: true` for a bus error.
pub(crate) async fn call(
    bus: &Bus,
    agent: &Agent,
    profile: Profile,
    name: &str,
    arguments: JsonObject,
) -> Option<CallToolResult> {
    let tool = all().find(|t| t.name == name)?;
    Metrics::inc(&bus.metrics.mcp_tool_calls);
    tracing::debug!(tool = name, agent = %agent.id, "mcp tool call");
    let outcome = (tool.call)(bus.clone(), agent.clone(), profile, arguments).await;
    Some(match outcome {
        Ok(mut answer) => {
            match profile {
                Profile::Full => {}
                Profile::Core => agent_text::clean(&mut answer.structured),
            }
            let mut result = CallToolResult::structured(answer.structured);
            result.content = vec![ContentBlock::text(answer.text)];
            result
        }
        Err(e) => {
            Metrics::inc(&bus.metrics.mcp_tool_errors);
            let body = error_body(&e);
            let text = serde_json::to_string(&body).unwrap_or_else(|_| body.code.clone());
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
    })
}

/// Tool `T`'s call: its arguments parsed, then its run answered within `bus.request_timeout_ms`
/// plus its [`Tool::extra_wait`], as every HTTP request is (`http::request_deadline`); the run
/// goes on to its end when it is not ([`Bus::finish_within_deadline`]).
fn call_as<T: Tool>(
    bus: Bus,
    agent: Agent,
    profile: Profile,
    arguments: JsonObject,
) -> BoxFuture<'static, BusResult<Answer>> {
    Box::pin(async move {
        let arguments: T::Arguments = parse(arguments)?;
        let extra = T::extra_wait(&arguments);
        let owned = bus.clone();
        bus.finish_within_deadline(extra, async move {
            let call = Call {
                bus: &owned,
                agent: &agent,
                profile,
            };
            Ok(T::run(call, arguments).await?.answer)
        })
        .await
    })
}

/// Parses a tool's arguments; anything that does not fit is `Invalid` (the model sees why).
fn parse<T: DeserializeOwned>(arguments: JsonObject) -> BusResult<T> {
    serde_json::from_value(Value::Object(arguments)).map_err(|e| {
        BusError::invalid(format!("arguments do not fit the tool's input schema: {e}"))
    })
}

/// One tool's answer before it becomes a `CallToolResult`: its structured content as stored
/// (agent-written strings raw: [`call`] cleans them under core), and its text, agent-written
/// strings cleaned.
struct Answer {
    structured: Value,
    text: String,
}

/// A tool's answer, made from a `T` (its [`Tool::Answer`], so the output schema is what it
/// answers).
pub(super) struct Reply<T> {
    answer: Answer,
    view: PhantomData<fn() -> T>,
}

impl<T: Serialize> Reply<T> {
    /// The view as structured content, and the same JSON as text with its agent-written
    /// strings cleaned ([`agent_text::clean`]).
    pub(super) fn of(view: &T) -> Reply<T> {
        // The views hold strings, numbers, ids, times and JSON objects with string keys only:
        // serializing them cannot fail.
        let structured = serde_json::to_value(view).expect("a view serializes to JSON");
        Reply {
            answer: Answer {
                text: agent_text::cleaned(&structured).to_string(),
                structured,
            },
            view: PhantomData,
        }
    }

    /// An answer whose text keeps every body apart from the rest: a preamble saying bodies are
    /// data, the view's JSON without its bodies (agent-written strings cleaned), then each body
    /// fenced ([`Fence::body`]). Its `structuredContent` is the view, with each body fenced as
    /// well ([`Fence::json`]) under the core profile, bare under full (whose output schemas say
    /// `body` is the body).
    pub(super) fn fenced(
        view: &T,
        bodies: &[Fenced<'_>],
        fence: &Fence,
        list: &str,
        profile: Profile,
    ) -> Reply<T> {
        let Reply {
            answer: Answer { mut structured, .. },
            ..
        } = Reply::of(view);
        let mut metadata = agent_text::cleaned(&structured);
        if let Some(items) = metadata.get_mut(list).and_then(Value::as_array_mut) {
            for item in items {
                if let Some(o) = item.as_object_mut() {
                    o.remove("body");
                }
            }
        }
        let mut text = format!(
            "{} {BODIES_ARE_DATA} Each body below sits between a BEGIN and an END line carrying \
             the fence tag {}; only those lines delimit it.\n{metadata}\n",
            match bodies.len() {
                1 => "1 message.".to_owned(),
                n => format!("{n} messages."),
            },
            fence.tag()
        );
        for b in bodies {
            text.push_str(&fence.body(b));
        }
        match profile {
            Profile::Full => {}
            Profile::Core => fence.json(&mut structured, list, bodies),
        }
        Reply {
            answer: Answer { structured, text },
            view: PhantomData,
        }
    }
}

/// `Ok(Reply::of(&view))`: the answer of most tools.
pub(super) fn reply<T: Serialize>(view: T) -> BusResult<Reply<T>> {
    Ok(Reply::of(&view))
}

/// `max_bytes` within 1 and the largest body the bus carries (so any body can be read whole).
pub(super) fn check_max_bytes(max_bytes: usize) -> BusResult<()> {
    let max = crewbus_domain::MAX_BODY_BYTES as usize;
    if max_bytes == 0 || max_bytes > max {
        return Err(BusError::invalid(format!(
            "max_bytes must be between 1 and {max}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_declared_once_and_core_lists_twelve() {
        let names: Vec<&str> = all().map(|t| t.name).collect();
        let unique: std::collections::HashSet<&str> = names.iter().copied().collect();
        assert_eq!((names.len(), unique.len()), (24, 24), "{names:?}");
        assert_eq!(all().filter(|t| t.core.is_some()).count(), 12);
    }
}
