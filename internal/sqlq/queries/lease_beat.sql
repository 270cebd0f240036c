-- lease_beat: one round trip per lease round (relay/lease.go's beatParams). Announce this
-- relay (@owner, alive for @ttl_ms ms), renew the leases it still holds at the epochs it
-- knows (@partitions, @epochs) for @ttl_ms ms, and count the live relays. Returns the
-- live count and the partitions renewed; a partition not returned was taken over (its
-- epoch moved on) and is lost. Members gone for an hour are forgotten. A relay's first
-- heartbeat (its row is new: xmax = 0) wakes the other relays' lease rounds, if there are
-- any, on @channel, so they make room for it at once rather than at their next round.
-- The relay's state goes with the beat (0009_relay_members_state.sql): @breaker_open_ms
-- the milliseconds left of the breaker's wait (null: closed; 0: open, its wait over, a
-- probe due or under way), turned into a time on the database's clock; @published,
-- @dead and @breaker_opens, the events published and dead and the breaker's openings
-- since it started.
WITH beat AS (
    INSERT INTO {{schema}}.relay_members (owner, expires_at, breaker_open_until, published, dead, breaker_opens)
    VALUES (@owner, now() + @ttl_ms * interval '1 millisecond', now() + @breaker_open_ms::bigint * interval '1 millisecond', @published, @dead, @breaker_opens)
    ON CONFLICT (owner) DO UPDATE SET heartbeat_at = now(), expires_at = excluded.expires_at,
        breaker_open_until = excluded.breaker_open_until, published = excluded.published,
        dead = excluded.dead, breaker_opens = excluded.breaker_opens
    RETURNING owner, xmax = 0 AS joined
), forget AS (
    DELETE FROM {{schema}}.relay_members WHERE expires_at < now() - interval '1 hour'
), renewed AS (
    UPDATE {{schema}}.leases l
    SET expires_at = now() + @ttl_ms * interval '1 millisecond', renewed_at = now()
    FROM unnest(@partitions::int[], @epochs::bigint[]) AS m(partition, epoch)
    WHERE l.partition = m.partition AND l.epoch = m.epoch AND l.owner = @owner
    RETURNING l.partition
)
SELECT 1 + (SELECT count(*) FROM {{schema}}.relay_members WHERE expires_at > now() AND owner <> @owner),
       coalesce((SELECT array_agg(partition) FROM renewed), '{}'),
       (SELECT pg_notify(@channel, 'lease') FROM beat
        WHERE joined AND EXISTS (SELECT FROM {{schema}}.relay_members WHERE expires_at > now() AND owner <> @owner))
