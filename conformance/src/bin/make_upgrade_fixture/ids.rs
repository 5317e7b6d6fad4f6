//! Fixed ids for a fixture: the adapters mint random ids (`Uuid::new_v4`), so the dump is
//! rewritten with the `n`-th id made named [`fixed`]`(n)`, and the same store made twice gives the
//! same text.

use std::collections::{BTreeSet, HashMap};

use uuid::Uuid;

/// The `n`-th fixed id (from 1): `20261202-0000-4000-8000-<n as 12 hex digits>` (a valid
/// version-4 id, recognisable as the fixture's).
pub fn fixed(n: usize) -> Uuid {
    Uuid::from_u128(0x2026_1202_0000_4000_8000_0000_0000_0000 | n as u128)
}

/// The renaming of one store's ids, in the order they were named.
#[derive(Debug, Default)]
pub struct Renamer {
    order: Vec<Uuid>,
    new: HashMap<Uuid, Uuid>,
}

impl Renamer {
    /// Names `old` with the next fixed id, unless it is named already.
    pub fn name(&mut self, old: Uuid) {
        if !self.new.contains_key(&old) {
            self.order.push(old);
            self.new.insert(old, fixed(self.order.len()));
        }
    }

    /// The fixed id of `old`. Panics when it was never named.
    pub fn get(&self, old: Uuid) -> Uuid {
        *self
            .new
            .get(&old)
            .unwrap_or_else(|| panic!("id {old} was never named"))
    }

    /// Panics naming the ids of `found` (every id of the store's id columns) that were never
    /// named: a table this generator does not know of holds ids, and the fixture would keep a
    /// random one.
    pub fn covers(&self, found: &BTreeSet<Uuid>) {
        let unnamed: Vec<&Uuid> = found.iter().filter(|u| !self.new.contains_key(u)).collect();
        assert!(
            unnamed.is_empty(),
            "ids in the store that the generator did not name: {unnamed:?}"
        );
    }

    /// `text` with every named id replaced by its fixed one, in each form a store writes it:
    /// hyphenated (uuid columns, JSON payloads, locators), 32 lowercase hex digits (recipient
    /// keys `a<hex>`, queue ack tokens) and 32 upper-case hex digits (SQLite's `X'…'` blobs).
    pub fn apply(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for old in &self.order {
            let new = self.new[old];
            out = out.replace(&old.hyphenated().to_string(), &new.hyphenated().to_string());
            out = out.replace(&old.simple().to_string(), &new.simple().to_string());
            let upper = |u: Uuid| u.simple().to_string().to_uppercase();
            out = out.replace(&upper(*old), &upper(new));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_named_id_is_replaced() {
        let old = Uuid::new_v4();
        let mut r = Renamer::default();
        r.name(old);
        r.name(old);
        let text = format!(
            "'{}' 'a{}' X'{}'",
            old.hyphenated(),
            old.simple(),
            old.simple().to_string().to_uppercase()
        );
        assert_eq!(
            r.apply(&text),
            "'20261202-0000-4000-8000-000000000001' 'a20261202000040008000000000000001' \
             X'20261202000040008000000000000001'"
        );
        assert_eq!(fixed(1).get_version_num(), 4);
    }
}
