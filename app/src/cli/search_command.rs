//! `crewbus search`: the operator's full-text search of a team's history as one of its agents
//! sees it (that agent's conversations), through the use case `GET /v1/search` and MCP
//! `search_messages` call — beside the store, every team in scope.

use std::process::ExitCode;

use clap::Args;
use crewbus_domain::{BusResult, DEFAULT_SEARCH_LIMIT, SearchHit, SearchQuery};
use serde_json::Value;

use crate::config::Config;
use crate::edge::search::SearchView;

/// `crewbus search` options.
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Query syntax: every word must occur (body or conversation title), in any order; \"two words\"
in quotes must occur together; -word must not occur. Case and punctuation do not matter.
Messages are found about 2 s after they are stored (the server's index worker indexes them).

Examples:
  crewbus search --team research --agent alice 'parser tabs'
  crewbus search --team research --agent alice --conversation 0190f7a2-… '\"release plan\" -draft'
  crewbus --json search --team research --agent bob --limit 50 deploy")]
pub struct SearchArgs {
    /// Team name or id.
    #[arg(long)]
    pub team: String,
    /// Search what this agent may read: the conversations it is a member of (name or id).
    #[arg(long)]
    pub agent: String,
    /// Only this conversation (the agent must be a member).
    #[arg(long, value_name = "ID")]
    pub conversation: Option<uuid::Uuid>,
    /// Hits per page, 1 to 100.
    #[arg(long, default_value_t = DEFAULT_SEARCH_LIMIT)]
    pub limit: u32,
    /// Hits to skip (the previous page's next offset), 0 to 999.
    #[arg(long, default_value_t = 0)]
    pub offset: u32,
    /// The words to find (1 to 256 characters).
    #[arg(value_name = "QUERY")]
    pub query: String,
}

/// `text` safe for a terminal: agents wrote it, so every control character (escape sequences
/// that recolour, retitle or rewrite the operator's terminal, newlines) and every bidirectional
/// or invisible format character (which reorder or hide what is shown) becomes `�`.
fn terminal_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            let format = matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}');
            if c.is_control() || format { '\u{FFFD}' } else { c }
        })
        .collect()
}

/// One line of a hit's snippet, matched words between `*`s, [`terminal_safe`].
fn snippet_line(hit: &SearchHit) -> String {
    hit.snippet
        .iter()
        .map(|s| {
            let text = terminal_safe(&s.text);
            if s.matched { format!("*{text}*") } else { text }
        })
        .collect()
}

/// Runs the search. Errors: an unknown team or agent, or a conversation the agent is not in →
/// `NotFound`; a bad query, limit or offset → `Invalid`; the store unreachable → `Unavailable`.
pub async fn search(config: Config, args: SearchArgs, json: bool) -> BusResult<ExitCode> {
    let bus = crate::cli::commands::operator_bus(&config).await?;
    let team = bus.find_team(&args.team).await?;
    let agent = bus.find_agent(team.id, &args.agent).await?;
    let query = SearchQuery {
        text: args.query,
        conversation: args.conversation,
        limit: args.limit,
        offset: args.offset,
    };
    let page = bus.search(&agent, &query).await?;
    if json {
        let view = SearchView::from(page);
        println!("{}", serde_json::to_value(&view).unwrap_or(Value::Null));
        return Ok(ExitCode::SUCCESS);
    }
    if page.hits.is_empty() {
        println!(
            "no messages {} may read match {:?}",
            terminal_safe(&agent.name),
            query.text
        );
        return Ok(ExitCode::SUCCESS);
    }
    let names = bus.team_agents(&agent).await?;
    let name = |id: uuid::Uuid| {
        names
            .iter()
            .find(|a| a.id == id)
            .map_or_else(|| id.to_string(), |a| a.name.clone())
    };
    for hit in &page.hits {
        println!(
            "{}  {} #{}  {}  (message {})",
            hit.sent_at.format("%Y-%m-%d %H:%M:%S"),
            terminal_safe(&hit.conversation_title),
            hit.seq,
            terminal_safe(&name(hit.sender)),
            hit.message
        );
        println!("    {}", snippet_line(hit));
    }
    match page.next_offset {
        Some(next) => println!("{} hit(s); more with --offset {next}", page.hits.len()),
        None => println!("{} hit(s)", page.hits.len()),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_bidi_controls_never_reach_the_terminal() {
        let hostile = "zebra \u{1b}[31mRED\u{1b}]0;pwned\u{7}\n\u{202e}evil\u{200b}";
        let safe = terminal_safe(hostile);
        assert!(!safe.chars().any(|c| c.is_control()), "{safe:?}");
        assert!(
            !safe.contains('\u{202e}') && !safe.contains('\u{200b}'),
            "{safe:?}"
        );
        assert!(safe.starts_with("zebra \u{FFFD}[31mRED"), "{safe:?}");
        assert_eq!(terminal_safe("café 日本"), "café 日本");
    }
}
