-- Leader leases: a row per lease, held by holder until expires_at by the
-- database's clock.
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
