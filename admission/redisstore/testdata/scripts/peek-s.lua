
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1 = up('<dddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end

local function dec(x) return fmt('%d', x) end

local a1, ok1, rt1, rs1 = 0, 1, 0, 0
do
  local v = redis.call('HMGET', KEYS[1], 'b', 'a')
  local b = tonumber(v[1])
  if b then
    local now = (now_s - b) * E9 + now_n
    a1 = tonumber(v[2]) or 0
    local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', dec(now - x1))
    for i = 1, #old do a1 = a1 - tonumber(string.match(old[i], ':(%d+)')) end
    if redis.call('ZCARD', KEYS[2]) > #old then
      rs1 = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]) + x1 - now
    else
      a1 = 0
    end
  end
end
if a1 > am1 then ok1 = 0 end
return pk('<dddddd', now_s, now_n, ok1, am1 - min(a1, am1), rs1, rt1)
