//! crewbus JetStream adapter (`JetStreamBackend`): one team's body stream and inbox stream over
//! async-nats, and stream provisioning. Built in the JetStream issue; nothing is exported yet.
