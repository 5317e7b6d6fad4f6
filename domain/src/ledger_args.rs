//! Argument rules the `Ledger` port states for every implementation (durations, backend names,
//! batch sizes), so the memory and Postgres ledgers cannot drift.

use std::time::Duration;

use crate::{BusError, BusResult, MAX_PAGE};

/// `d` as a `chrono::Duration`. Errors: [`BusError::Invalid`] when it does not fit.
pub fn ledger_span(d: Duration) -> BusResult<chrono::Duration> {
    chrono::Duration::from_std(d).map_err(|_| BusError::invalid("duration is out of range"))
}

/// `d` as a `chrono::Duration`, refusing zero. Errors: [`BusError::Invalid`] naming `what`.
pub fn positive_ledger_span(d: Duration, what: &str) -> BusResult<chrono::Duration> {
    if d.is_zero() {
        return Err(BusError::invalid(format!("{what} must be positive")));
    }
    ledger_span(d)
}

/// A backend or inbox name is non-blank. Errors: [`BusError::Invalid`] naming `what`.
pub fn validate_backend_name(what: &str, name: &str) -> BusResult<()> {
    if name.trim().is_empty() {
        return Err(BusError::invalid(format!("{what} name is empty")));
    }
    Ok(())
}

/// A batch (of settlements, delivery ids, hand-out requests…) holds at most [`MAX_PAGE`] items.
/// Errors: [`BusError::Invalid`].
pub fn validate_batch(len: usize) -> BusResult<()> {
    if len > MAX_PAGE {
        return Err(BusError::invalid(format!(
            "a batch holds at most {MAX_PAGE} items"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(positive_ledger_span(Duration::ZERO, "lease").is_err());
        assert_eq!(
            positive_ledger_span(Duration::from_secs(2), "lease").unwrap(),
            chrono::Duration::seconds(2)
        );
        assert!(matches!(
            ledger_span(Duration::MAX),
            Err(BusError::Invalid { .. })
        ));
        assert!(validate_backend_name("body backend", " ").is_err());
        assert!(validate_backend_name("body backend", "memory").is_ok());
        assert!(validate_batch(MAX_PAGE).is_ok());
        assert!(validate_batch(MAX_PAGE + 1).is_err());
    }
}
