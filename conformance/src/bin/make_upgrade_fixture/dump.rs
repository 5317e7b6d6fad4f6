//! A store's data as SQL text: one multi-row `INSERT` per table in foreign-key order, then the
//! counters (Postgres sequences, SQLite's `sqlite_sequence`), inside one `BEGIN; … COMMIT;`. No
//! schema and no `_sqlx_migrations`: the file is loaded into a store migrated to the version it
//! was made at. Each adapter's module reads its catalog into a [`Dump`]; [`Dump::render`] writes
//! the text the same way for both.

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::ids::Renamer;

/// One table's rows, each already a SQL tuple `(v1, v2, …)` of literals in column order.
#[derive(Debug)]
pub struct Table {
    /// The table's name.
    pub name: String,
    /// Its columns, in order (generated columns left out).
    pub columns: Vec<String>,
    /// `OVERRIDING SYSTEM VALUE` is needed (a Postgres `GENERATED ALWAYS` identity column).
    pub overriding: bool,
    /// The rows come in the order of an integer key the store assigned (kept); otherwise
    /// they are sorted as text after renaming, so the order never depends on a random id.
    pub keyed: bool,
    /// The rows.
    pub rows: Vec<String>,
}

/// A store's data.
#[derive(Debug)]
pub struct Dump {
    /// Every table but `_sqlx_migrations`, parents before children.
    pub tables: Vec<Table>,
    /// Statements that set the store's counters after the inserts.
    pub counters: Vec<String>,
    /// Every id in the store's id columns (Postgres `uuid`, SQLite 16-byte blobs).
    pub ids: BTreeSet<Uuid>,
}

impl Dump {
    /// The SQL text: the `header` lines as comments, then the data, with every id renamed by
    /// `renamer` (none: as stored).
    pub fn render(&self, header: &[String], renamer: Option<&Renamer>) -> String {
        let rename = |s: &str| renamer.map_or_else(|| s.to_owned(), |r| r.apply(s));
        let mut out = String::new();
        for line in header {
            if line.is_empty() {
                out.push_str("--\n");
            } else {
                out.push_str(&format!("-- {line}\n"));
            }
        }
        out.push_str("\nBEGIN;\n");
        for table in &self.tables {
            out.push('\n');
            if table.rows.is_empty() {
                out.push_str(&format!("-- {}: no rows\n", table.name));
                continue;
            }
            let mut rows: Vec<String> = table.rows.iter().map(|r| rename(r)).collect();
            if !table.keyed {
                rows.sort();
            }
            let columns: Vec<String> = table.columns.iter().map(|c| quote_ident(c)).collect();
            out.push_str(&format!(
                "INSERT INTO {} ({}){} VALUES\n",
                quote_ident(&table.name),
                columns.join(", "),
                if table.overriding {
                    " OVERRIDING SYSTEM VALUE"
                } else {
                    ""
                }
            ));
            out.push_str(&format!("    {};\n", rows.join(",\n    ")));
        }
        if !self.counters.is_empty() {
            out.push('\n');
            for c in &self.counters {
                out.push_str(c);
                out.push('\n');
            }
        }
        out.push_str("\nCOMMIT;\n");
        out
    }
}

/// `name` as a double-quoted SQL identifier (both dialects).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as a single-quoted SQL string literal (both dialects; Postgres with
/// `standard_conforming_strings`, its default).
pub fn quote_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `bytes` as text when they are UTF-8 holding no U+0000 (which neither dialect's string literal
/// can carry): bodies and payloads stay readable in the fixture.
pub fn readable(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !s.contains('\0'))
}

/// Upper-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// `tables` (in creation order) ordered so every table comes after the tables its foreign keys
/// name (`edges`: `(child, parent)`); ties keep creation order. Panics on a cycle.
pub fn foreign_key_order(tables: Vec<String>, edges: &[(String, String)]) -> Vec<String> {
    let mut left = tables;
    let mut done: Vec<String> = Vec::new();
    while !left.is_empty() {
        let next = left
            .iter()
            .position(|t| {
                edges
                    .iter()
                    .filter(|(child, parent)| child == t && parent != t)
                    .all(|(_, parent)| done.contains(parent) || !left.contains(parent))
            })
            .unwrap_or_else(|| panic!("foreign keys form a cycle among {left:?}"));
        done.push(left.remove(next));
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_come_first_and_ties_keep_creation_order() {
        let tables = ["receipts", "teams", "messages", "agents", "bodies"].map(String::from);
        let edges = [
            ("receipts", "messages"),
            ("receipts", "agents"),
            ("messages", "agents"),
            ("agents", "teams"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        assert_eq!(
            foreign_key_order(tables.to_vec(), &edges),
            ["teams", "agents", "messages", "receipts", "bodies"]
        );
    }

    #[test]
    fn literals_escape_quotes_and_text_needs_no_nul() {
        assert_eq!(quote_text("it's"), "'it''s'");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(readable(b"gr\xc3\xbc\xc3\x9fe"), Some("grüße"));
        assert_eq!(readable(b"a\0b"), None);
        assert_eq!(readable(b"\xff"), None);
        assert_eq!(hex(&[0x0a, 0xff]), "0AFF");
    }
}
