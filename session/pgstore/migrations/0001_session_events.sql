-- The session store (PGSessions): one row per record of a session, numbered
-- from 0. The primary key makes an append at a seq that exists fail instead
-- of writing twice. data is bytea, not jsonb: records are kept byte for
-- byte (jsonb reorders keys and drops duplicates and whitespace); query them
-- as JSON with convert_from(data, 'UTF8')::jsonb.
-- session_id sorts byte-wise (COLLATE "C"), as List promises.
CREATE TABLE session_events (
    session_id text COLLATE "C" NOT NULL,
    seq        bigint      NOT NULL CHECK (seq >= 0),
    data       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
