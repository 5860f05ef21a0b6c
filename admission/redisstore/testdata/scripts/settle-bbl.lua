
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki, d1, am1, x1, y1, d2, am2, x2, y2, l3, tk3, am3, x3 = up('<ddddddddddddddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
local apply = true
local dels, nd = {}, 0

local f3 = pk('<c1d', 'l', l3)
local h3 = redis.call('HMGET', KEYS[ki + 3], 'h', f3)

if idem > 0 then
  local el = (now_s - t0s) * E9 + (now_n - t0n)
  if mark > 0 and el < x3 - idem * 1000000 then
    -- The lease outlives any retry: held means not applied yet.
    apply = h3[2] ~= false
  elseif ki == 0 then
    return 'K'
  elseif not redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) then
    apply = false
  elseif mark > 0 and not h3[2] and el < x3 then
    -- Released, not expired: by an attempt that took the branch above.
    apply = false
  end
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
      nd = nd + 1; dels[nd] = KEYS[ki + 1]
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

local r2 = 0
do
  local a, ts, tn = x2, now_s, now_n
  local v = redis.call('GET', KEYS[ki + 2])
  if v then a, ts, tn = up('<ddd', v) end
  local el = (now_s - ts) * E9 + (now_n - tn)
  if el > 0 then
    local f = a + el * (am2 / y2)
    if f < x2 then a = f else a = x2 end
    ts, tn = now_s, now_n
  end
  if a < -x2 then a = -x2 elseif a > x2 then a = x2 end
  if apply then
    a = a - d2
    if a < -x2 then a = -x2 end
    if a >= x2 then
      a = x2
      nd = nd + 1; dels[nd] = KEYS[ki + 2]
    elseif d2 < 0 then
      redis.call('SET', KEYS[ki + 2], pk('<ddd', a, ts, tn), 'KEEPTTL')
    else
      local ms = ceil((x2 - a) * (y2 / am2) / 1000000)
      if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
      redis.call('SET', KEYS[ki + 2], pk('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
    end
  end
  if a > 0 then r2 = floor(a) end
end

local r3 = 0
do
  local b, a, q, e, m = 0, 0, 0, -1, 0
  if h3[1] then b, a, q, e, m = up('<ddddd', h3[1]) end
  if h3[2] then
    a = a - tk3
    if a <= 0 then
      a = 0
      nd = nd + 1; dels[nd] = KEYS[ki + 3]
    else
      redis.call('HDEL', KEYS[ki + 3], f3)
      redis.call('HSET', KEYS[ki + 3], 'h', pk('<ddddd', b, a, q, e, m))
    end
  end
  if am3 > a then r3 = am3 - a end
end
local r = pk('<ddd', r1, r2, r3)
if nd > 0 then redis.call('DEL', unpack(dels, 1, nd)) end
return r
