-- claim_ordered_lock: how an ordered claim locks what it picked, as the CTE claimed (the
-- ctids it takes). Not a statement: claim_ordered.sql, claim_ordered_delete.sql,
-- poison_candidates_ordered.sql (after claim_ordered_pick.sql) and the by-seq claims
-- claim_seqs_ordered*.sql (after claim_seqs_ordered_pick.sql) include it after their pick,
-- which leaves picked: (seq, ctid, head, ready), every row of a head's aggregate the
-- claim would take in seq order, head its aggregate's first, ready whether it is
-- available now.
--
-- It locks each picked row where discovery found it: by ctid, a TID scan, where a
-- primary-key lookup cost an index descent per row (and another for the mark): the
-- claim ran 15% faster. A row changed by someone else since the statement's snapshot is
-- at another ctid by the time it is locked: the recheck of the locked version fails and
-- it is left out (a gap), as is a row no longer pending (the state is checked again on
-- the locked row). No tuple moves while the statement runs (only VACUUM FULL or CLUSTER
-- move tuples, and their lock conflicts with this statement's). The state is written as
-- num_nulls(…) = 2 so that no partial index can serve this step: scanning
-- events_pending_aggregate with a ctid filter — the plan the planner chose when it
-- believed the pending rows few (ANALYZE after a drained backlog) — read the whole index,
-- dead entries of drained rows included, on every claim. With sequential scans
-- penalised in claim transactions (claimSettings in relay/claim.go), the TID scan is the
-- plan left, also in a generic plan made while the table was small.
locked AS MATERIALIZED (
    SELECT x.ctid FROM {{schema}}.events x
    WHERE x.ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE ready))
      AND num_nulls(x.published_at, x.dead_at) = 2
    FOR UPDATE SKIP LOCKED
), whole AS MATERIALIZED (
    -- whether every picked row was locked where the walk found it, compared by identity,
    -- not by count: before PostgreSQL's "missing EPQ recheck for TID Scan" fix (minor
    -- releases of late 2025), a head updated and committed after this statement's
    -- snapshot could be locked at its new version, at another ctid, while still pending;
    -- the counts matched, the mark below could not see that version, and the head's
    -- followers went out before it. Sorting a batch's ctids twice costs little beside
    -- the claim (and nothing when the batch is empty).
    SELECT (SELECT array_agg(ctid ORDER BY ctid) FROM locked)
           IS NOT DISTINCT FROM (SELECT array_agg(ctid ORDER BY ctid) FROM picked) AS ok
), claimed AS MATERIALIZED (
    -- every picked row locked: all of them (the common case: no join)
    SELECT ctid FROM locked
    WHERE (SELECT ok FROM whole)
    UNION ALL
    -- else, per aggregate, the rows before its first gap: a picked row whose own ctid
    -- was not locked is a gap
    SELECT ctid FROM (
        SELECT pk.ctid, bool_and(l.ctid IS NOT NULL) OVER (PARTITION BY pk.head ORDER BY pk.seq) AS before_gap
        FROM picked pk
        LEFT JOIN locked l ON l.ctid = pk.ctid
    ) w
    WHERE before_gap AND NOT (SELECT ok FROM whole)
)
