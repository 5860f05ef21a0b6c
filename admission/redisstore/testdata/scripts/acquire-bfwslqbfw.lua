
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace = up('<dddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end

local NEVER = -1

local MAXD = 4611686018427387903
local function ceil_ns(x)
  if x <= 0 then return 0 end
  if x > MAXD then return MAXD end
  return ceil(x)
end

local function dec(x) return fmt('%d', x) end

local function ttl(ns)
  local ms = ceil(ns / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  return dec(ms + grace)
end

local function window(per, hs, hn)
  local el = (now_s - hs) * E9 + (now_n - hn)
  local ws, wn = hs, hn
  if el < 0 or el >= per then
    local function tadd(s, n, d)
      local t = n + d
      local q = floor(t / E9)
      local r = t - q * E9
      if r < 0 then q = q - 1; r = r + E9 elseif r >= E9 then q = q + 1; r = r - E9 end
      return s + q, r
    end
    local k = floor(el / per)
    ws, wn = tadd(hs, hn, k * per)
    el = el - k * per
    while el < 0 do ws, wn = tadd(ws, wn, -per); el = el + per end
    while el >= per do ws, wn = tadd(ws, wn, per); el = el - per end
  end
  return ws, wn, el
end

local function far(el, per) return el < -1125899906842624 or el >= per + 1125899906842624 end

local function quota_place(ps, pn, len, cal)
  if cal == 1 then return ps, pn, (now_s - ps) * E9 + (now_n - pn) end
  return window(len, ps, pn)
end

local function quota_skew(ps, pn, len, cal)
  local el = (now_s - ps) * E9 + (now_n - pn)
  if cal == 1 then return el < 0 or el >= len end
  return far(el, len)
end

local function wkey(key, s, n)
  local base = string.match(key, '^(.*)@')
  if n == 0 then return base .. '@' .. fmt('%d', s) end
  return base .. '@' .. fmt('%d.%09d', s, n)
end

local function mcost(m) return tonumber(string.match(m, ':(%d+)$')) end
local function mseq(m) return tonumber(string.match(m, '^(%d+):')) end
local function sl_load(h, z, per)
  local v = redis.call('HMGET', h, 'b', 'a', 'q')
  local a, q, b, dirty = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[1]), false
  if b == nil then b = now_s end
  local now = (now_s - b) * E9 + now_n
  if now > 4503599627370496 then
    local shift = (now_s - b) * E9
    local all = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
    for i = 1, #all, 2 do
      redis.call('ZADD', z, dec(tonumber(all[i + 1]) - shift), all[i])
    end
    b, now, dirty = now_s, now_n, true
  end
  local old = redis.call('ZRANGEBYSCORE', z, '-inf', dec(now - per))
  if #old > 0 then
    for i = 1, #old do a = a - mcost(old[i]) end
    redis.call('ZREMRANGEBYSCORE', z, '-inf', dec(now - per))
    dirty = true
  end
  local card = redis.call('ZCARD', z)
  if card == 0 then a = 0 end
  return b, now, a, q, card, dirty
end
-- sl_last returns the score of the last entry, nil for none.
local function sl_last(z, card)
  if card == 0 then return nil end
  return tonumber(redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')[2])
end
-- sl_save writes a sliding log back, or deletes it when it holds no entry.
local function sl_save(h, z, per, b, now, a, q, card)
  local last = sl_last(z, card)
  if not last then
    redis.call('DEL', h, z)
    return
  end
  local px = ttl(last + per - now)
  redis.call('HSET', h, 'b', dec(b), 'a', dec(a), 'q', dec(q))
  redis.call('PEXPIRE', h, px)
  redis.call('PEXPIRE', z, px)
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
do
local sh2, n2, am2, x2, hs2, hn2, rf2 = up('<ddddddd', ARGV[1], 73)
if (now_s - hs2) * E9 + (now_n - hn2) < -1125899906842624 or (now_s - hs2) * E9 + (now_n - hn2) >= x2 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local sh3, n3, am3, x3, hs3, hn3 = up('<dddddd', ARGV[1], 129)
if far((now_s - hs3) * E9 + (now_n - hn3), x3) then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local sh6, n6, am6, hs6, hn6, x6, cal6 = up('<ddddddd', ARGV[1], 241)
if quota_skew(hs6, hn6, x6, cal6) then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local sh8, n8, am8, x8, hs8, hn8, rf8 = up('<ddddddd', ARGV[1], 337)
if (now_s - hs8) * E9 + (now_n - hn8) < -1125899906842624 or (now_s - hs8) * E9 + (now_n - hn8) >= x8 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local sh9, n9, am9, x9, hs9, hn9 = up('<dddddd', ARGV[1], 393)
if far((now_s - hs9) * E9 + (now_n - hn9), x9) then return 'S' .. pk('<dd', now_s, now_n) end
end
local function take1(fits)
local sh9, n9, am9, x9, hs9, hn9 = up('<dddddd', ARGV[1], 393)
local v9 = redis.call('GET', KEYS[10])

local ws9, wn9, el9 = window(x9, hs9, hn9)
local a9, b9, ok9, rt9, rs9 = 0, 0, 0, 0, 0
if v9 then
  local a, b, ss, sn = up('<dddd', v9)
  local d = (ws9 - ss) * E9 + (wn9 - sn)
  if d == 0 then a9, b9 = a, b elseif d == x9 then b9 = a end
end
local est9 = b9 * (1 - el9 / x9) + a9
if est9 + n9 <= am9 then
  a9, est9, ok9 = a9 + n9, est9 + n9, 1
elseif n9 > am9 then
  rt9 = NEVER
elseif a9 + n9 <= am9 then
  rt9 = ceil_ns(x9 * (b9 - (am9 - a9 - n9)) / b9 - el9)
else
  rt9 = ceil_ns(x9 - el9 + x9 * (a9 - (am9 - n9)) / a9)
end
if a9 > 0 then rs9 = ceil_ns(2 * x9 - el9) elseif b9 > 0 then rs9 = ceil_ns(x9 - el9) end
fits = fits and (ok9 == 1 or sh9 == 1)

if fits and ok9 == 1 then
  if a9 > 0 then
    redis.call('SET', KEYS[10], pk('<dddd', a9, b9, ws9, wn9), 'PX', ttl(2 * x9 - el9))
  elseif b9 > 0 then
    redis.call('SET', KEYS[10], pk('<dddd', a9, b9, ws9, wn9), 'PX', ttl(x9 - el9))
  else
    redis.call('DEL', KEYS[10])
  end
end
return fits, pk('<dddddd', ok9, am9 - min(ceil(est9), am9), rs9, rt9, ws9, wn9)
end
local function take0(fits)
local sh1, n1, am1, x1, y1, sh2, n2, am2, x2, hs2, hn2, rf2, sh3, n3, am3, x3, hs3, hn3, sh4, n4, am4, x4, sh5, n5, am5, x5, sh6, n6, am6, hs6, hn6, x6, cal6, sh7, n7, am7, x7, y7, sh8, n8, am8, x8, hs8, hn8, rf8 = up('<ddddddddddddddddddddddddddddddddddddddddddddd', ARGV[1], 33)
local vs = redis.call('MGET', KEYS[1], KEYS[3], KEYS[7], KEYS[8])
local v1 = vs[1]
local v3 = vs[2]
local v6 = vs[3]
local v7 = vs[4]

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

local ws2, wn2, el2, k2 = hs2, hn2, (now_s - hs2) * E9 + (now_n - hn2), KEYS[2]
if el2 < 0 or el2 >= x2 then
  ws2, wn2, el2 = window(x2, hs2, hn2)
  k2 = wkey(k2, ws2, wn2)
end
local a2, ok2, c2 = 0, 0, 0
if rf2 == 1 or n2 <= 0 or n2 > am2 then a2 = tonumber(redis.call('GET', k2)) or 0 end
if n2 > 0 and n2 <= am2 and (rf2 == 0 or a2 + n2 <= am2) then
  c2 = redis.call('INCRBY', k2, fmt('%d', n2))
  if c2 == n2 then redis.call('PEXPIRE', k2, ttl(x2 - el2)) end
  a2 = c2 - n2
end
if a2 + n2 <= am2 then a2, ok2 = a2 + n2, 1 end

local ws3, wn3, el3 = window(x3, hs3, hn3)
local a3, b3, ok3, rt3, rs3 = 0, 0, 0, 0, 0
if v3 then
  local a, b, ss, sn = up('<dddd', v3)
  local d = (ws3 - ss) * E9 + (wn3 - sn)
  if d == 0 then a3, b3 = a, b elseif d == x3 then b3 = a end
end
local est3 = b3 * (1 - el3 / x3) + a3
if est3 + n3 <= am3 then
  a3, est3, ok3 = a3 + n3, est3 + n3, 1
elseif n3 > am3 then
  rt3 = NEVER
elseif a3 + n3 <= am3 then
  rt3 = ceil_ns(x3 * (b3 - (am3 - a3 - n3)) / b3 - el3)
else
  rt3 = ceil_ns(x3 - el3 + x3 * (a3 - (am3 - n3)) / a3)
end
if a3 > 0 then rs3 = ceil_ns(2 * x3 - el3) elseif b3 > 0 then rs3 = ceil_ns(x3 - el3) end

local b4, now4, a4, q4, c4, hd4 = sl_load(KEYS[4], KEYS[5], x4)
local a04, q04, ok4, rt4, rs4, add4 = a4, q4, 0, 0, 0, nil
if a4 + n4 <= am4 then
  if n4 > 0 then
    q4 = q4 + 1
    add4 = q4 .. ':' .. dec(n4)
    a4 = a4 + n4
  end
  ok4 = 1
elseif n4 > am4 then
  rt4 = NEVER
else
  local need, from = a4 + n4 - am4, 0
  while need > 0 and from < c4 do
    local es = redis.call('ZRANGE', KEYS[5], from, from + 127, 'WITHSCORES')
    if #es == 0 then break end
    for i = 1, #es, 2 do
      need = need - mcost(es[i])
      if need <= 0 then
        rt4 = tonumber(es[i + 1]) + x4 - now4
        break
      end
    end
    from = from + 128
  end
end
if add4 then
  rs4 = x4
else
  local last = sl_last(KEYS[5], c4)
  if last then rs4 = last + x4 - now4 end
end

local b5, a5, q5, e5, m5
do
  local h = redis.call('HGET', KEYS[6], 'h')
  if h then
    b5, a5, q5, e5, m5 = up('<ddddd', h)
    if e5 < 0 then e5 = nil end
  else
    b5, a5, q5, m5 = now_s, 0, now_s * 1000000 + floor(now_n / 1000), 0
  end
end
local now5 = (now_s - b5) * E9 + now_n
local exp5, hd5 = 0, false
if a5 > 0 and (e5 == nil or e5 <= now5 or now5 > 4503599627370496) then
  b5, now5, m5, e5, a5, exp5 = lease_scan(KEYS[6], now_s, now_n, b5, now5, m5, a5)
  hd5 = true
end
if a5 <= 0 then a5, e5 = 0, nil end
local a05, q05, ok5, add5 = a5, q5, 0, 0
if a5 + n5 <= am5 then
  if n5 > 0 then q5, add5, a5 = q5 + 1, n5, a5 + n5 end
  ok5 = 1
end
local ws6, wn6, el6 = quota_place(hs6, hn6, x6, cal6)

local a6, ok6, rt6 = 0, 0, 0
if v6 then
  local a, ss, sn = up('<ddd', v6)
  if ss == ws6 and sn == wn6 then a6 = a end
end
local rs6 = x6 - el6
if a6 + n6 <= am6 then
  a6, ok6 = a6 + n6, 1
elseif n6 > am6 then
  rt6 = NEVER
else
  rt6 = rs6
end

local a7, ts7, tn7 = x7, now_s, now_n
if v7 then a7, ts7, tn7 = up('<ddd', v7) end
do
  local el = (now_s - ts7) * E9 + (now_n - tn7)
  if el > 0 then
    local f = a7 + el * (am7 / y7)
    if f < x7 then a7 = f else a7 = x7 end
    ts7, tn7 = now_s, now_n
  end
end
if a7 < -x7 then a7 = -x7 elseif a7 > x7 then a7 = x7 end
local a07, ok7 = a7, 0
if n7 <= a7 then a7, ok7 = a7 - n7, 1 end

local ws8, wn8, el8, k8 = hs8, hn8, (now_s - hs8) * E9 + (now_n - hn8), KEYS[9]
if el8 < 0 or el8 >= x8 then
  ws8, wn8, el8 = window(x8, hs8, hn8)
  k8 = wkey(k8, ws8, wn8)
end
local a8, ok8, c8 = 0, 0, 0
if rf8 == 1 or n8 <= 0 or n8 > am8 then a8 = tonumber(redis.call('GET', k8)) or 0 end
if n8 > 0 and n8 <= am8 and (rf8 == 0 or a8 + n8 <= am8) then
  c8 = redis.call('INCRBY', k8, fmt('%d', n8))
  if c8 == n8 then redis.call('PEXPIRE', k8, ttl(x8 - el8)) end
  a8 = c8 - n8
end
if a8 + n8 <= am8 then a8, ok8 = a8 + n8, 1 end
fits = fits and (ok1 == 1 or sh1 == 1) and (ok2 == 1 or sh2 == 1) and (ok3 == 1 or sh3 == 1) and (ok4 == 1 or sh4 == 1) and (ok5 == 1 or sh5 == 1) and (ok6 == 1 or sh6 == 1) and (ok7 == 1 or sh7 == 1) and (ok8 == 1 or sh8 == 1)
local rest
fits, rest = take1(fits)

if fits and ok1 == 1 and n1 > 0 then
  local ms = ceil((x1 - a1) * (y1 / am1) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[1], pk('<ddd', a1, ts1, tn1), 'PX', fmt('%d', ms + grace))
elseif a01 >= x1 then
  if v1 then redis.call('DEL', KEYS[1]) end
else
  redis.call('SET', KEYS[1], pk('<ddd', a01, ts1, tn1), 'KEEPTTL')
end

if c2 > 0 and not (fits and ok2 == 1) then
  if redis.call('DECRBY', k2, dec(n2)) <= 0 then redis.call('DEL', k2) end
end

if fits and ok3 == 1 then
  if a3 > 0 then
    redis.call('SET', KEYS[3], pk('<dddd', a3, b3, ws3, wn3), 'PX', ttl(2 * x3 - el3))
  elseif b3 > 0 then
    redis.call('SET', KEYS[3], pk('<dddd', a3, b3, ws3, wn3), 'PX', ttl(x3 - el3))
  else
    redis.call('DEL', KEYS[3])
  end
end

if fits and add4 then
  redis.call('ZADD', KEYS[5], dec(now4), add4)
  sl_save(KEYS[4], KEYS[5], x4, b4, now4, a4, q4, c4 + 1)
elseif hd4 then
  if c4 == 0 then
    redis.call('DEL', KEYS[4], KEYS[5])
  else
    redis.call('HSET', KEYS[4], 'b', dec(b4), 'a', dec(a04), 'q', dec(q04))
  end
end

if fits and add5 > 0 then
  local exp, e, m = now5 + x5, e5, m5
  if exp > m then m = exp end
  if e == nil or exp < e then e = exp end
  redis.call('HSET', KEYS[6], pk('<c1d', 'l', q5), pk('<dd', exp, add5), 'h', pk('<ddddd', b5, a5, q5, e, m))
  local ms = ceil((m - now5) / 1000000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[6], fmt('%d', ms + grace))
elseif hd5 then
  if a05 == 0 then
    redis.call('DEL', KEYS[6])
  else
    redis.call('HSET', KEYS[6], 'h', pk('<ddddd', b5, a05, q05, e5 or -1, m5))
  end
end

if fits and ok6 == 1 then
  if a6 > 0 then
    redis.call('SET', KEYS[7], pk('<ddd', a6, ws6, wn6), 'PX', ttl(x6 - el6))
  else
    redis.call('DEL', KEYS[7])
  end
end

if fits and ok7 == 1 and n7 > 0 then
  local ms = ceil((x7 - a7) * (y7 / am7) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[8], pk('<ddd', a7, ts7, tn7), 'PX', fmt('%d', ms + grace))
elseif a07 >= x7 then
  if v7 then redis.call('DEL', KEYS[8]) end
else
  redis.call('SET', KEYS[8], pk('<ddd', a07, ts7, tn7), 'KEEPTTL')
end

if c8 > 0 and not (fits and ok8 == 1) then
  if redis.call('DECRBY', k8, dec(n8)) <= 0 then redis.call('DEL', k8) end
end
return fits, pk('<dddddddddddddddddddddddddddd', ok1, a1, ok2, a2, ok3, am3 - min(ceil(est3), am3), rs3, rt3, ws3, wn3, ok4, am4 - min(a4, am4), rs4, rt4, ok5, a5, (add5 > 0 and q5 or 0), exp5, ok6, am6 - min(a6, am6), rs6, rt6, ws6, wn6, ok7, a7, ok8, a8) .. rest
end
local _, r = take0(true)
return pk('<dd', now_s, now_n) .. r
