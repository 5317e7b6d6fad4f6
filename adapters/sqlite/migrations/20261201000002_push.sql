-- Push registrations: one row per destination per run, scoped by tenant in every query (tenant
-- leads the primary key and both indexes). auth_credentials holds what the app gives it (a
-- SealedPush envelope in production). No foreign key to runs: the push store stands alone.
-- park_order is the position at which the row was parked (parked() lists oldest first): one
-- more than the largest in use, taken in the parking statement itself (SQLite has no
-- sequences; write transactions are serialised, so two parks never take the same number).
CREATE TABLE push_registrations (
    tenant            TEXT    NOT NULL,
    run_id            BLOB    NOT NULL CHECK (length(run_id) = 16),
    id                TEXT    NOT NULL,
    url               TEXT    NOT NULL,
    auth_scheme       TEXT,
    auth_credentials  TEXT,
    next_seq          INTEGER NOT NULL CHECK (next_seq >= 0),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 4294967295),
    next_attempt_at   INTEGER NOT NULL,
    last_error        TEXT,
    parked            INTEGER NOT NULL DEFAULT 0 CHECK (parked IN (0, 1)),
    park_order        INTEGER CHECK (park_order >= 0),
    PRIMARY KEY (tenant, run_id, id),
    CHECK ((auth_scheme IS NULL) = (auth_credentials IS NULL)),
    CHECK (parked = (park_order IS NOT NULL))
) STRICT;

CREATE INDEX push_registrations_due
    ON push_registrations (tenant, next_attempt_at, run_id, id)
    WHERE parked = 0;

CREATE INDEX push_registrations_parked
    ON push_registrations (tenant, park_order)
    WHERE parked = 1;
