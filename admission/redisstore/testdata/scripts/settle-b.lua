
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki, d1, am1, x1, y1 = up('<ddddddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
local apply = true

if idem > 0 then
  if ki == 0 then return 'K' end
  apply = redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) ~= false
end

local r1 = 0
do
  local a, ts, tn = x1, now_s, now_n
  local v = redis.call('GET', KEYS[ki + 1])
  if v then a, ts, tn = up('<ddd', v) end
  local el = (now_s - ts) * E9 + (now_n - tn)
  if el > 0 then
    local f = a + el * (am1 / y1)
    if f < x1 then a = f else a = x1 end
    ts, tn = now_s, now_n
  end
  if a < -x1 then a = -x1 elseif a > x1 then a = x1 end
  if apply then
    a = a - d1
    if a < -x1 then a = -x1 end
    if a >= x1 then
      a = x1
      redis.call('DEL', KEYS[ki + 1])
    elseif d1 < 0 then
      redis.call('SET', KEYS[ki + 1], pk('<ddd', a, ts, tn), 'KEEPTTL')
    else
      local ms = ceil((x1 - a) * (y1 / am1) / 1000000)
      if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
      redis.call('SET', KEYS[ki + 1], pk('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
    end
  end
  if a > 0 then r1 = floor(a) end
end
local r = pk('<d', r1)
return r
