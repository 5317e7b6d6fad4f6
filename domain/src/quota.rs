//! Stream quotas, provisioning outcomes, quota changes and the storage account: pure arithmetic.

use serde::{Deserialize, Serialize};

use crate::{BusError, BusResult};

/// Which of a team's two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// The body stream (limits retention, discard new).
    Bodies,
    /// The inbox stream (work-queue retention, discard old).
    Inbox,
}

impl StreamKind {
    /// Smallest accepted `max_bytes` for this kind, in bytes: 2 MiB for bodies (a 1 MiB body
    /// plus headers must always fit), 1 MiB for the inbox.
    pub fn min_bytes(self) -> u64 {
        match self {
            StreamKind::Bodies => 2 * 1024 * 1024,
            StreamKind::Inbox => 1024 * 1024,
        }
    }

    /// `"bodies"` or `"inbox"`.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamKind::Bodies => "bodies",
            StreamKind::Inbox => "inbox",
        }
    }
}

impl std::fmt::Display for StreamKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Most messages the stream keeps (count).
    pub max_messages: u64,
    /// Most bytes the stream keeps (bytes, as the broker accounts them).
    pub max_bytes: u64,
}

impl Quotas {
    /// The default quotas of a team's body stream, whatever keeps it: a million bodies, 1 GiB.
    pub const DEFAULT_BODIES: Quotas = Quotas {
        max_messages: 1_000_000,
        max_bytes: 1024 * 1024 * 1024,
    };

    /// The default quotas of a team's inbox stream: 100,000 references, 64 MiB.
    pub const DEFAULT_INBOX: Quotas = Quotas {
        max_messages: 100_000,
        max_bytes: 64 * 1024 * 1024,
    };

    /// Checks the floors before any broker is asked: `max_messages` ≥ 1 and `max_bytes` ≥
    /// [`StreamKind::min_bytes`]. Errors: [`BusError::Invalid`] naming the floor.
    pub fn validate(&self, kind: StreamKind) -> BusResult<()> {
        if self.max_messages < 1 {
            return Err(BusError::invalid(format!(
                "{kind} stream max_messages must be at least 1"
            )));
        }
        let floor = kind.min_bytes();
        if self.max_bytes < floor {
            return Err(BusError::invalid(format!(
                "{kind} stream max_bytes must be at least {floor} bytes, got {}",
                self.max_bytes
            )));
        }
        Ok(())
    }

    /// Whether `messages`/`bytes` of contents exceed these limits.
    pub fn exceeded_by(&self, messages: u64, bytes: u64) -> bool {
        messages > self.max_messages || bytes > self.max_bytes
    }
}

/// A stream after provision or an update: limits and contents as read back from the broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provisioned {
    /// The stream's name.
    pub name: String,
    /// Which stream.
    pub kind: StreamKind,
    /// Whether this call created it (`false`: it existed and kept its limits).
    pub created: bool,
    /// The limits in force.
    pub limits: Quotas,
    /// Messages stored (count).
    pub messages: u64,
    /// Bytes stored (bytes).
    pub bytes: u64,
}

impl Provisioned {
    /// Whether the limits in force differ from `wanted` (an existing stream keeps its limits
    /// whatever the configuration asks; this tells the caller).
    pub fn differs_from(&self, wanted: &Quotas) -> bool {
        self.limits != *wanted
    }

    /// Whether the contents read back exceed the limits (a publisher raced a decrease, or the
    /// broker does not evict).
    pub fn over_ceiling(&self) -> bool {
        self.limits.exceeded_by(self.messages, self.bytes)
    }
}

/// What changing a stream's quotas would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaChange {
    /// The stream's name.
    pub name: String,
    /// Which stream.
    pub kind: StreamKind,
    /// Limits in force now; what a rollback restores.
    pub current: Quotas,
    /// Limits asked for.
    pub wanted: Quotas,
    /// Messages stored when checked (count).
    pub messages: u64,
    /// Bytes stored when checked (bytes).
    pub bytes: u64,
    /// The stream's replica count (each reserved byte is reserved on every replica).
    pub replicas: u32,
}

impl QuotaChange {
    /// Bytes the broker must newly reserve: `max(0, wanted − current max_bytes) × replicas`,
    /// saturating, never negative.
    pub fn additional_bytes(&self) -> u64 {
        self.reservation().bytes()
    }

    /// What the change reserves: `max(0, wanted − current max_bytes)` on each of `replicas`.
    pub fn reservation(&self) -> Reservation {
        Reservation::new(
            self.wanted.max_bytes.saturating_sub(self.current.max_bytes),
            self.replicas,
        )
    }

    /// Whether any limit goes down (a change the broker may enforce by evicting).
    pub fn is_decrease(&self) -> bool {
        self.wanted.max_bytes < self.current.max_bytes
            || self.wanted.max_messages < self.current.max_messages
    }

    /// Whether nothing would change.
    pub fn is_noop(&self) -> bool {
        self.current == self.wanted
    }

    /// Whether the contents at check time exceed the wanted limits (the change must be refused).
    pub fn below_contents(&self) -> bool {
        self.wanted.exceeded_by(self.messages, self.bytes)
    }

    /// The [`BusError::Conflict`] for a ceiling below the contents, naming both.
    pub fn below_contents_error(&self) -> BusError {
        BusError::conflict(format!(
            "{} stream {} holds {} messages / {} bytes, more than the new ceiling of {} messages / {} bytes; \
             let retention free space first or choose a higher ceiling",
            self.kind,
            self.name,
            self.messages,
            self.bytes,
            self.wanted.max_messages,
            self.wanted.max_bytes
        ))
    }
}

/// A reservation of storage: `per_replica` bytes on each of `replicas` replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Bytes reserved on each replica.
    pub per_replica: u64,
    /// Replicas (at least 1: a stream always has one copy).
    pub replicas: u32,
}

impl Reservation {
    /// `per_replica` bytes on each of `replicas` (0 is treated as 1).
    pub fn new(per_replica: u64, replicas: u32) -> Self {
        Reservation {
            per_replica,
            replicas: replicas.max(1),
        }
    }

    /// The total: `per_replica × replicas`, saturating.
    pub fn bytes(&self) -> u64 {
        self.per_replica
            .saturating_mul(u64::from(self.replicas.max(1)))
    }
}

/// The account's storage: what is stored, what is reserved, and the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageAccount {
    /// Bytes stored across the account's streams.
    pub used: u64,
    /// Bytes reserved: Σ max_bytes × replicas over every stream.
    pub reserved: u64,
    /// The account's storage budget in bytes; `None` is unlimited (the broker reports −1).
    pub budget: Option<u64>,
}

impl StorageAccount {
    /// Whether `extra` more reserved bytes fit the budget: `reserved + extra ≤ budget`,
    /// saturating (an overflowing sum never fits a finite budget). Always true when unlimited.
    pub fn fits(&self, extra: u64) -> bool {
        match self.budget {
            None => true,
            Some(budget) => match self.reserved.checked_add(extra) {
                Some(total) => total <= budget,
                None => false,
            },
        }
    }

    /// Bytes still reservable (`budget − reserved`, saturating at 0); `None` when unlimited.
    pub fn available(&self) -> Option<u64> {
        self.budget.map(|b| b.saturating_sub(self.reserved))
    }

    /// The [`BusError::InsufficientStorage`] for a reservation that does not fit, with the
    /// arithmetic (total, and its factors: bytes per replica × replicas) and the remedy.
    pub fn refuse(&self, reservation: Reservation) -> BusError {
        BusError::InsufficientStorage {
            extra: reservation.bytes(),
            per_replica: reservation.per_replica,
            replicas: reservation.replicas,
            used: self.used,
            reserved: self.reserved,
            budget: self.budget,
            remedy:
                "raise the account's storage limit (max_file_store / account jetstream limits) \
                     or lower this stream's max_bytes"
                    .to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1024 * 1024;

    fn change(current: u64, wanted: u64, replicas: u32) -> QuotaChange {
        QuotaChange {
            name: "s".into(),
            kind: StreamKind::Bodies,
            current: Quotas {
                max_messages: 10,
                max_bytes: current,
            },
            wanted: Quotas {
                max_messages: 10,
                max_bytes: wanted,
            },
            messages: 0,
            bytes: 0,
            replicas,
        }
    }

    #[test]
    fn floors() {
        let q = |m, b| Quotas {
            max_messages: m,
            max_bytes: b,
        };
        assert!(q(1, 2 * MIB).validate(StreamKind::Bodies).is_ok());
        assert!(matches!(
            q(1, 2 * MIB - 1).validate(StreamKind::Bodies),
            Err(BusError::Invalid { .. })
        ));
        assert!(q(1, MIB).validate(StreamKind::Inbox).is_ok());
        assert!(q(1, MIB - 1).validate(StreamKind::Inbox).is_err());
        assert!(q(0, 4 * MIB).validate(StreamKind::Inbox).is_err());
    }

    #[test]
    fn additional_bytes_examples() {
        assert_eq!(change(10, 30, 3).additional_bytes(), 60);
        assert_eq!(change(30, 10, 3).additional_bytes(), 0);
        assert_eq!(change(10, 10, 1).additional_bytes(), 0);
        assert_eq!(change(0, u64::MAX, 3).additional_bytes(), u64::MAX);
        // replicas 0 is treated as 1: a stream always has at least one copy.
        assert_eq!(change(0, 5, 0).additional_bytes(), 5);
    }

    #[test]
    fn provisioned_rules() {
        let p = Provisioned {
            name: "s".into(),
            kind: StreamKind::Inbox,
            created: false,
            limits: Quotas {
                max_messages: 5,
                max_bytes: 100,
            },
            messages: 5,
            bytes: 100,
        };
        assert!(!p.over_ceiling());
        assert!(!p.differs_from(&p.limits));
        assert!(p.differs_from(&Quotas {
            max_messages: 6,
            max_bytes: 100
        }));
        let over = Provisioned { messages: 6, ..p };
        assert!(over.over_ceiling());
    }

    #[test]
    fn storage_account_examples() {
        let a = StorageAccount {
            used: 0,
            reserved: 70,
            budget: Some(100),
        };
        assert!(a.fits(30));
        assert!(!a.fits(31));
        assert_eq!(a.available(), Some(30));
        assert!(!a.fits(u64::MAX));
        let unlimited = StorageAccount { budget: None, ..a };
        assert!(unlimited.fits(u64::MAX));
        assert!(matches!(
            a.refuse(Reservation::new(31, 1)),
            BusError::InsufficientStorage { extra: 31, .. }
        ));
    }

    /// The refusal carries the factor of its total: `1 GiB × 3 replicas`, not only 3221225472.
    #[test]
    fn a_refusal_shows_bytes_per_replica_times_replicas() {
        const GIB: u64 = 1 << 30;
        let a = StorageAccount {
            used: 0,
            reserved: 0,
            budget: Some(GIB),
        };
        let e = a.refuse(Reservation::new(GIB, 3));
        match &e {
            BusError::InsufficientStorage {
                extra,
                per_replica,
                replicas,
                ..
            } => assert_eq!((*extra, *per_replica, *replicas), (3 * GIB, GIB, 3)),
            other => panic!("expected InsufficientStorage, got {other:?}"),
        }
        assert!(
            e.to_string()
                .contains("3221225472 more bytes (1 GiB × 3 replicas) would be reserved"),
            "{e}"
        );
        let raise = change(GIB, 3 * GIB, 3);
        assert_eq!(raise.reservation(), Reservation::new(2 * GIB, 3));
        assert_eq!(raise.additional_bytes(), 6 * GIB);
        assert_eq!(Reservation::new(5, 0).replicas, 1);
    }

    #[test]
    fn below_contents() {
        let mut c = change(100, 50, 1);
        c.bytes = 60;
        assert!(c.below_contents());
        assert!(c.is_decrease());
        assert!(matches!(
            c.below_contents_error(),
            BusError::Conflict { .. }
        ));
        c.bytes = 50;
        assert!(!c.below_contents());
    }

    proptest! {
        #[test]
        fn additional_bytes_is_never_negative_and_matches_exact_math(
            current in any::<u64>(), wanted in any::<u64>(), replicas in 0u32..8
        ) {
            let got = change(current, wanted, replicas).additional_bytes();
            let exact = (wanted.saturating_sub(current) as u128) * (replicas.max(1) as u128);
            prop_assert_eq!(got as u128, exact.min(u64::MAX as u128));
            if wanted <= current { prop_assert_eq!(got, 0); }
        }

        #[test]
        fn fits_matches_exact_math(reserved in any::<u64>(), extra in any::<u64>(), budget in proptest::option::of(any::<u64>())) {
            let a = StorageAccount { used: 0, reserved, budget };
            let exact = match budget {
                None => true,
                Some(b) => (reserved as u128 + extra as u128) <= b as u128,
            };
            prop_assert_eq!(a.fits(extra), exact);
        }

        #[test]
        fn differs_from_is_inequality(m1 in 1u64..5, b1 in 1u64..5, m2 in 1u64..5, b2 in 1u64..5) {
            let p = Provisioned {
                name: "s".into(), kind: StreamKind::Bodies, created: true,
                limits: Quotas { max_messages: m1, max_bytes: b1 }, messages: 0, bytes: 0,
            };
            let w = Quotas { max_messages: m2, max_bytes: b2 };
            prop_assert_eq!(p.differs_from(&w), (m1, b1) != (m2, b2));
        }

        #[test]
        fn over_ceiling_iff_some_content_exceeds(m in 0u64..10, b in 0u64..10, msgs in 0u64..12, bytes in 0u64..12) {
            let p = Provisioned {
                name: "s".into(), kind: StreamKind::Bodies, created: true,
                limits: Quotas { max_messages: m, max_bytes: b }, messages: msgs, bytes,
            };
            prop_assert_eq!(p.over_ceiling(), msgs > m || bytes > b);
        }
    }
}
