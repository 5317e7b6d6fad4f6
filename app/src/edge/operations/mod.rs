//! The agent operations declared once for both edges ([`super::operation::Operation`]), a file
//! per group, each with its list (`each`) in the MCP catalogue's order. The operations not yet
//! declared here have a hand-written HTTP handler (`http/`) and MCP tool (`mcp/tools/`).

pub(crate) mod presence;
pub(crate) mod runs;
pub(crate) mod search;
pub(crate) mod team;

use super::operation::Visit;

/// Every operation declared here, group by group.
pub(crate) fn each(v: &mut impl Visit) {
    team::each(v);
    runs::each(v);
    search::each(v);
    presence::each(v);
}
