-- Push registrations (PUSH.md §3): one row per destination per run, scoped by tenant in every
-- query (tenant leads the primary key and both indexes). URL, scheme, ids and cursor are clear
-- (the store queries on them); auth_credentials holds what the app gives it — a SealedPush
-- envelope in production. No foreign key to runs: the push store stands alone.
--
-- The CHECKs keep every counter non-negative, so nothing negative is ever read back and turned
-- into a huge u64 cursor or attempt count; attempts is bigint so any u32 fits.
CREATE SEQUENCE push_park_order AS bigint;

CREATE TABLE push_registrations (
    tenant            text        NOT NULL,
    run_id            uuid        NOT NULL,
    id                text        NOT NULL,
    url               text        NOT NULL,
    auth_scheme       text,
    auth_credentials  text,
    next_seq          bigint      NOT NULL CHECK (next_seq >= 0),
    attempts          bigint      NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 4294967295),
    next_attempt_at   timestamptz NOT NULL,
    last_error        text,
    parked            boolean     NOT NULL DEFAULT false,
    -- When the row was parked, as a position (push_park_order): parked() lists oldest first.
    park_order        bigint      CHECK (park_order >= 0),
    PRIMARY KEY (tenant, run_id, id),
    CHECK ((auth_scheme IS NULL) = (auth_credentials IS NULL)),
    CHECK (parked = (park_order IS NOT NULL))
);

-- due(): only rows that can be due, in claim order.
CREATE INDEX push_registrations_due
    ON push_registrations (tenant, next_attempt_at, run_id, id COLLATE "C")
    WHERE NOT parked;

-- parked(): the dead-letter list, oldest first.
CREATE INDEX push_registrations_parked
    ON push_registrations (tenant, park_order)
    WHERE parked;
