-- notify: ask relays for a wake-up. @channel is the wake-up channel (outbox.WakeupChannel),
-- @payload the payload ('' from outbox.Notifier; a token from the relay's listener self-test).
-- Run in autocommit, outside any business transaction: a transaction that issues NOTIFY
-- takes PostgreSQL's global notify lock at commit, which serialises all such commits.
SELECT pg_notify(@channel, @payload)
