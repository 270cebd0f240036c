-- claim_seen: the last columns a claim returns, what its claim_floor.sql part saw: the
-- lowest pending seq at or above the floor (null: none), the snapshot's xmin and xmax,
-- the last replay's id, how long after now() the next pending row not yet available
-- comes due (null: none among the first 64). Not a statement: each claim includes it at
-- the end of its RETURNING list (the same values on every row; relay/floor.go takes them
-- in).
(SELECT min_pending FROM seen), (SELECT xmin FROM seen), (SELECT xmax FROM seen), (SELECT replays FROM seen), (SELECT after FROM due)
