-- Adds an entry to a stream unless its event was added before (Config.Dedup).
-- KEYS[1]: the stream; KEYS[2]: the event's dedup key.
-- ARGV[1]: the dedup key's lifetime in ms; ARGV[2]: MAXLEN ~ (0: none);
-- ARGV[3], ARGV[4], ...: the entry's fields and values.
-- Returns the new entry's id, or nil when the event was added before. The stream's
-- type is checked before anything is written, and the dedup key is set only after the
-- XADD succeeded: a failed add leaves no mark that would make its retry a "duplicate".
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return false
end
local xadd = {'XADD', KEYS[1]}
if ARGV[2] ~= '0' then
  xadd[#xadd + 1] = 'MAXLEN'
  xadd[#xadd + 1] = '~'
  xadd[#xadd + 1] = ARGV[2]
end
xadd[#xadd + 1] = '*'
for i = 3, #ARGV do
  xadd[#xadd + 1] = ARGV[i]
end
local id = redis.call(unpack(xadd))
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return id
