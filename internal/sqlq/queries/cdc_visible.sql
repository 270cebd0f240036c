-- cdc_visible: whether every transaction of @xids (bigint[]: their 32-bit xids, as the
-- WAL's Begin and Stream Start messages name them) is visible in this statement's
-- snapshot. The WAL can announce a commit a moment before the committing session leaves
-- the server's list of running transactions, and a claim whose snapshot does not see a
-- transaction's rows would leave them (cdc/source.go waits for this first). Each xid is
-- widened to a full one (xid8) from the snapshot's xmax: in its epoch, or the one
-- before when it is above xmax's low 32 bits.
WITH snap AS MATERIALIZED (
    SELECT pg_current_snapshot() AS s, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax
)
SELECT coalesce(bool_and(pg_visible_in_snapshot(
           (CASE WHEN ((n.xmax >> 32) << 32) + u.x > n.xmax
                 THEN (((n.xmax >> 32) - 1) << 32) + u.x
                 ELSE ((n.xmax >> 32) << 32) + u.x END)::text::xid8,
           n.s)), true)
FROM unnest(@xids::bigint[]) AS u(x), snap n
