//! Postgres-specific ledger behaviours: concurrency and fencing against a real database.

use crate::TestFn;

pub(crate) const TESTS: &[(&str, TestFn)] = &[];
