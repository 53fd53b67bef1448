-- Each window hit carries its rank among its key's hits (1, 2, 3, ...), so a window check
-- finds the limit-th most recent hit by one index lookup instead of walking `limit` entries.
ALTER TABLE lockgate_window_hits ADD COLUMN n BIGINT NOT NULL DEFAULT 0;

UPDATE lockgate_window_hits AS h SET n = ranked.n
FROM (SELECT id, row_number() OVER (PARTITION BY scope, key ORDER BY at, id) AS n FROM lockgate_window_hits) AS ranked
WHERE h.id = ranked.id;

CREATE UNIQUE INDEX lockgate_window_hits_rank ON lockgate_window_hits (scope, key, n);
