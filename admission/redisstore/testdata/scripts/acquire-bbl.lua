
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1, y1, sh2, n2, am2, x2, y2, sh3, n3, am3, x3 = up('<dddddddddddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end

local function lease_scan(k, s, n, b, now, m, a)
  local shift = 0
  if now > 4503599627370496 then
    shift = (s - b) * 1000000000
    b, now, m = s, n, m - shift
  end
  local all = redis.call('HGETALL', k)
  local dels, e, expired = {}, nil, 0
  for x = 1, #all, 2 do
    local f = all[x]
    if string.byte(f, 1) == 108 then
      local exp, cost = struct.unpack('<dd', all[x + 1])
      exp = exp - shift
      if exp <= now then
        dels[#dels + 1] = f
        a = a - cost
        expired = expired + 1
      else
        if shift ~= 0 then redis.call('HSET', k, f, struct.pack('<dd', exp, cost)) end
        if e == nil or exp < e then e = exp end
      end
    end
  end
  for x = 1, #dels, 500 do
    redis.call('HDEL', k, unpack(dels, x, math.min(x + 499, #dels)))
  end
  if e == nil then a = 0 end -- no lease left, whatever the sum said
  return b, now, m, e, a, expired
end
local vs = redis.call('MGET', KEYS[1], KEYS[2])
local v1 = vs[1]
local v2 = vs[2]

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

local a2, ts2, tn2 = x2, now_s, now_n
if v2 then a2, ts2, tn2 = up('<ddd', v2) end
do
  local el = (now_s - ts2) * E9 + (now_n - tn2)
  if el > 0 then
    local f = a2 + el * (am2 / y2)
    if f < x2 then a2 = f else a2 = x2 end
    ts2, tn2 = now_s, now_n
  end
end
if a2 < -x2 then a2 = -x2 elseif a2 > x2 then a2 = x2 end
local a02, ok2 = a2, 0
if n2 <= a2 then a2, ok2 = a2 - n2, 1 end

local b3, a3, q3, e3, m3
do
  local h = redis.call('HGET', KEYS[3], 'h')
  if h then
    b3, a3, q3, e3, m3 = up('<ddddd', h)
    if e3 < 0 then e3 = nil end
  else
    b3, a3, q3, m3 = now_s, 0, now_s * 1000000 + floor(now_n / 1000), 0
  end
end
local now3 = (now_s - b3) * E9 + now_n
local exp3, hd3 = 0, false
if a3 > 0 and (e3 == nil or e3 <= now3 or now3 > 4503599627370496) then
  b3, now3, m3, e3, a3, exp3 = lease_scan(KEYS[3], now_s, now_n, b3, now3, m3, a3)
  hd3 = true
end
if a3 <= 0 then a3, e3 = 0, nil end
local a03, q03, ok3, add3 = a3, q3, 0, 0
if a3 + n3 <= am3 then
  if n3 > 0 then q3, add3, a3 = q3 + 1, n3, a3 + n3 end
  ok3 = 1
end
local fits = (ok1 == 1 or sh1 == 1) and (ok2 == 1 or sh2 == 1) and (ok3 == 1 or sh3 == 1)

if fits and ok1 == 1 and n1 > 0 then
  local ms = ceil((x1 - a1) * (y1 / am1) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[1], pk('<ddd', a1, ts1, tn1), 'PX', fmt('%d', ms + grace))
elseif a01 >= x1 then
  if v1 then redis.call('DEL', KEYS[1]) end
else
  redis.call('SET', KEYS[1], pk('<ddd', a01, ts1, tn1), 'KEEPTTL')
end

if fits and ok2 == 1 and n2 > 0 then
  local ms = ceil((x2 - a2) * (y2 / am2) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[2], pk('<ddd', a2, ts2, tn2), 'PX', fmt('%d', ms + grace))
elseif a02 >= x2 then
  if v2 then redis.call('DEL', KEYS[2]) end
else
  redis.call('SET', KEYS[2], pk('<ddd', a02, ts2, tn2), 'KEEPTTL')
end

if fits and add3 > 0 then
  local exp, e, m = now3 + x3, e3, m3
  if exp > m then m = exp end
  if e == nil or exp < e then e = exp end
  redis.call('HSET', KEYS[3], pk('<c1d', 'l', q3), pk('<dd', exp, add3), 'h', pk('<ddddd', b3, a3, q3, e, m))
  local ms = ceil((m - now3) / 1000000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[3], fmt('%d', ms + grace))
elseif hd3 then
  if a03 == 0 then
    redis.call('DEL', KEYS[3])
  else
    redis.call('HSET', KEYS[3], 'h', pk('<ddddd', b3, a03, q03, e3 or -1, m3))
  end
end
return pk('<dddddddddd', now_s, now_n, ok1, a1, ok2, a2, ok3, a3, (add3 > 0 and q3 or 0), exp3)
