
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1, y1 = up('<ddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
local v1 = redis.call('GET', KEYS[1])

local a1, ts1, tn1 = x1, now_s, now_n
if v1 then a1, ts1, tn1 = up('<ddd', v1) end
do
  local el = (now_s - ts1) * E9 + (now_n - tn1)
  if el > 0 then
    local f = a1 + el * (am1 / y1)
    if f < x1 then a1 = f else a1 = x1 end
    ts1, tn1 = now_s, now_n
  end
end
if a1 < -x1 then a1 = -x1 elseif a1 > x1 then a1 = x1 end
local a01, ok1 = a1, 0
if n1 <= a1 then a1, ok1 = a1 - n1, 1 end
return pk('<dddd', now_s, now_n, ok1, a1)
