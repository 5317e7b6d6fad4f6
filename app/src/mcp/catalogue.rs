//! The tool catalogue: `tools/list`, derived from the tools' declarations (`mcp/tools/`: each
//! tool's name, title, descriptions written for a model, effect and argument and answer types)
//! as annotations and schemas, in two profiles that shape it (every tool stays callable in
//! both):
//!
//! - [`Profile::Full`] (the default): all 24 tools, each with its `outputSchema`.
//! - [`Profile::Core`]: the 12 tools an agent's loop needs (who am I and who is there, talk,
//!   receive and confirm, the five lease tools), with no `outputSchema` (answers keep their
//!   `structuredContent`, in which core answers fence message bodies: `mcp/tools/`) and
//!   tighter descriptions that name the answer's main fields instead.
//!   About a quarter of full's bytes (BENCHMARKS.md), for hosts that load every tool into the
//!   model's context.
//!
//! Each catalogue is built once, on first use.

use std::sync::LazyLock;

use rmcp::model::{Tool, ToolAnnotations};

use super::profile::Profile;
use super::schema::{Side, portable};
use super::tools::{self, Declared, Effect};

fn annotations(spec: &Declared) -> ToolAnnotations {
    let a = ToolAnnotations::with_title(spec.title).open_world(false);
    match spec.effect {
        Effect::ReadOnly => a.read_only(true),
        Effect::Idempotent => a.read_only(false).destructive(false).idempotent(true),
        Effect::Destructive => a.read_only(false).destructive(true).idempotent(false),
        Effect::Additive => a.read_only(false).destructive(false).idempotent(false),
    }
}

static FULL: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    tools::all()
        .map(|spec| {
            Tool::new(
                spec.name,
                spec.description,
                portable((spec.input)(), Side::Input),
            )
            .with_title(spec.title)
            .with_raw_output_schema(portable((spec.output)(), Side::Output).into())
            .with_annotations(annotations(spec))
        })
        .collect()
});

static CORE: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    tools::all()
        .filter_map(|spec| {
            let description = spec.core?;
            Some(
                Tool::new(
                    spec.name,
                    description,
                    portable((spec.input)(), Side::Input),
                )
                .with_title(spec.title)
                .with_annotations(annotations(spec)),
            )
        })
        .collect()
});

/// Every tool, in a stable order: the full profile, and the set a tool name is looked up in.
pub(crate) fn full() -> &'static [Tool] {
    &FULL
}

/// The tools `profile` lists, in the full catalogue's order.
pub(crate) fn listed(profile: Profile) -> &'static [Tool] {
    match profile {
        Profile::Full => &FULL,
        Profile::Core => &CORE,
    }
}
