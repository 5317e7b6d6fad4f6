//! crewbus conformance suite: one async function per behaviour, generic over each port, and the
//! real-server fixtures the adapters' test targets use.
#![warn(missing_docs)]

pub mod nats;
