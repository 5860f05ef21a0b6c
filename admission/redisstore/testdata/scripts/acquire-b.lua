
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
local fits = (ok1 == 1 or sh1 == 1)

if fits and ok1 == 1 and n1 > 0 then
  local ms = ceil((x1 - a1) * (y1 / am1) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[1], pk('<ddd', a1, ts1, tn1), 'PX', fmt('%d', ms + grace))
elseif a01 >= x1 then
  if v1 then redis.call('DEL', KEYS[1]) end
else
  redis.call('SET', KEYS[1], pk('<ddd', a01, ts1, tn1), 'KEEPTTL')
end
return pk('<dddd', now_s, now_n, ok1, a1)
