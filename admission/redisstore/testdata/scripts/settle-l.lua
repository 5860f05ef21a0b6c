
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki, l1, tk1, am1, x1 = up('<ddddddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
local apply = true

local f1 = pk('<c1d', 'l', l1)
local h1 = redis.call('HMGET', KEYS[ki + 1], 'h', f1)

local r1 = 0
do
  local b, a, q, e, m = 0, 0, 0, -1, 0
  if h1[1] then b, a, q, e, m = up('<ddddd', h1[1]) end
  if h1[2] then
    a = a - tk1
    if a <= 0 then
      a = 0
      redis.call('DEL', KEYS[ki + 1])
    else
      redis.call('HDEL', KEYS[ki + 1], f1)
      redis.call('HSET', KEYS[ki + 1], 'h', pk('<ddddd', b, a, q, e, m))
    end
  end
  if am1 > a then r1 = am1 - a end
end
local r = pk('<d', r1)
return r
