-- The sandbox state machine is one table; its record is the whole JSON
-- object, and the columns beside it are copies of its fields for queries
-- across replicas (by project, by node). Keys compare bytewise (COLLATE
-- "C") so that listings come in the same order as from bbolt.
CREATE TABLE sandboxes (
    id         text COLLATE "C" PRIMARY KEY,
    project    text NOT NULL DEFAULT '',
    state      text NOT NULL DEFAULT '',
    node       text NOT NULL DEFAULT '',
    record     jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandboxes_project ON sandboxes (project);
CREATE INDEX sandboxes_node ON sandboxes (node);

-- Every other bucket (events, snapshots, keys, quotas, secrets, pools).
CREATE TABLE records (
    bucket text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    value  jsonb NOT NULL,
    PRIMARY KEY (bucket, key)
);
