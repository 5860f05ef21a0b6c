
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki = up('<ddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
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

local function bounded(x, d, am)
  if d < 0 then return max(x + d, 0) end
  return max(x, min(x + d, am))
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
do
local d2, ss2, sn2, am2, x2, hs2, hn2 = up('<ddddddd', ARGV[1], 105)
if (now_s - hs2) * E9 + (now_n - hn2) < -1125899906842624 or (now_s - hs2) * E9 + (now_n - hn2) >= x2 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local d3, ss3, sn3, am3, x3, hs3, hn3 = up('<ddddddd', ARGV[1], 161)
if far((now_s - hs3) * E9 + (now_n - hn3), x3) then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local d6, ss6, sn6, am6, hs6, hn6, x6, cal6 = up('<dddddddd', ARGV[1], 289)
if quota_skew(hs6, hn6, x6, cal6) then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local d8, ss8, sn8, am8, x8, hs8, hn8 = up('<ddddddd', ARGV[1], 385)
if (now_s - hs8) * E9 + (now_n - hn8) < -1125899906842624 or (now_s - hs8) * E9 + (now_n - hn8) >= x8 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
end
do
local d9, ss9, sn9, am9, x9, hs9, hn9 = up('<ddddddd', ARGV[1], 441)
if far((now_s - hs9) * E9 + (now_n - hn9), x9) then return 'S' .. pk('<dd', now_s, now_n) end
end
local apply = true
local dels, nd = {}, 0

if idem > 0 then
  if ki == 0 then return 'K' end
  apply = redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) ~= false
end
local r = ''
local function settle0()
local d1, am1, x1, y1, d2, ss2, sn2, am2, x2, hs2, hn2, d3, ss3, sn3, am3, x3, hs3, hn3, d4, ss4, sn4, am4, x4, l5, tk5, am5, x5, d6, ss6, sn6, am6, hs6, hn6, x6, cal6, d7, am7, x7, y7, d8, ss8, sn8, am8, x8, hs8, hn8 = up('<dddddddddddddddddddddddddddddddddddddddddddddd', ARGV[1], 73)

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
  local ws, wn, el = window(x2, hs2, hn2)
  local wk = KEYS[ki + 2]
  if ws ~= hs2 or wn ~= hn2 then wk = wkey(wk, ws, wn) end
  local a = tonumber(redis.call('GET', wk)) or 0
  if apply and ((ss2 == ws and sn2 == wn) or d2 > 0) then
    local b = bounded(a, d2, am2)
    if b <= 0 then
      if a > 0 then nd = nd + 1; dels[nd] = wk end
    elseif a <= 0 then
      redis.call('SET', wk, dec(b), 'PX', ttl(x2 - el))
    elseif b ~= a then
      redis.call('INCRBY', wk, dec(b - a))
    end
    a = b
  end
  r2 = max(0, am2 - a)
end

local r3 = 0
do
  local ws, wn, el = window(x3, hs3, hn3)
  local a, b = 0, 0
  local v = redis.call('GET', KEYS[ki + 3])
  if v then
    local c, p, ss, sn = up('<dddd', v)
    local d = (ws - ss) * E9 + (wn - sn)
    if d == 0 then a, b = c, p elseif d == x3 then b = c end
  end
  local diff = (ss3 - ws) * E9 + (sn3 - wn)
  local moved = false
  if apply and (diff == 0 or d3 > 0) then
    a, moved = bounded(a, d3, am3), true
  elseif apply and diff == -x3 then
    b, moved = bounded(b, d3, am3), true
  end
  if moved then
    if a > 0 then
      redis.call('SET', KEYS[ki + 3], pk('<dddd', a, b, ws, wn), 'PX', ttl(2 * x3 - el))
    elseif b > 0 then
      redis.call('SET', KEYS[ki + 3], pk('<dddd', a, b, ws, wn), 'PX', ttl(x3 - el))
    else
      nd = nd + 1; dels[nd] = KEYS[ki + 3]
    end
  end
  r3 = max(0, am3 - ceil(b * (1 - el / x3) + a))
end

local r4 = 0
do
  local h, z = KEYS[ki + 4], KEYS[ki + 5]
  local b, now, a, q, card, dirty = sl_load(h, z, x4)
  if apply then
    local at = (ss4 - b) * E9 + sn4
    local found, seq = nil, -1
    if card > 0 then
      local es = redis.call('ZRANGEBYSCORE', z, dec(at), dec(at))
      for i = 1, #es do
        local s = mseq(es[i])
        if s > seq then found, seq = es[i], s end
      end
    end
    local room, d = max(0, am4 - a), d4
    if found then
      local cost = mcost(found)
      local dd = min(max(d, -cost), room)
      redis.call('ZREM', z, found)
      card = card - 1
      if cost + dd > 0 then
        redis.call('ZADD', z, dec(at), seq .. ':' .. dec(cost + dd))
        card = card + 1
      end
      a = a + dd
    elseif min(d, room) > 0 then
      d = min(d, room)
      q = q + 1
      redis.call('ZADD', z, dec(now), q .. ':' .. dec(d))
      card = card + 1
      a = a + d
    end
    sl_save(h, z, x4, b, now, a, q, card)
  elseif dirty then
    if card == 0 then
      redis.call('DEL', h, z)
    else
      redis.call('HSET', h, 'b', dec(b), 'a', dec(a), 'q', dec(q))
    end
  end
  r4 = max(0, am4 - a)
end

local f5 = pk('<c1d', 'l', l5)
local h5 = redis.call('HMGET', KEYS[ki + 6], 'h', f5)

local r5 = 0
do
  local b, a, q, e, m = 0, 0, 0, -1, 0
  if h5[1] then b, a, q, e, m = up('<ddddd', h5[1]) end
  if h5[2] then
    a = a - tk5
    if a <= 0 then
      a = 0
      nd = nd + 1; dels[nd] = KEYS[ki + 6]
    else
      redis.call('HDEL', KEYS[ki + 6], f5)
      redis.call('HSET', KEYS[ki + 6], 'h', pk('<ddddd', b, a, q, e, m))
    end
  end
  if am5 > a then r5 = am5 - a end
end
local r6 = 0
do
  local ws, wn, el = quota_place(hs6, hn6, x6, cal6)

  local a = 0
  local v = redis.call('GET', KEYS[ki + 7])
  if v then
    local c, s, n = up('<ddd', v)
    if s == ws and n == wn then a = c end
  end
  if apply and ((ss6 == ws and sn6 == wn) or d6 > 0) then
    a = bounded(a, d6, am6)
    if a > 0 then
      redis.call('SET', KEYS[ki + 7], pk('<ddd', a, ws, wn), 'PX', ttl(x6 - el))
    else
      nd = nd + 1; dels[nd] = KEYS[ki + 7]
    end
  end
  r6 = max(0, am6 - a)
end

local r7 = 0
do
  local a, ts, tn = x7, now_s, now_n
  local v = redis.call('GET', KEYS[ki + 8])
  if v then a, ts, tn = up('<ddd', v) end
  local el = (now_s - ts) * E9 + (now_n - tn)
  if el > 0 then
    local f = a + el * (am7 / y7)
    if f < x7 then a = f else a = x7 end
    ts, tn = now_s, now_n
  end
  if a < -x7 then a = -x7 elseif a > x7 then a = x7 end
  if apply then
    a = a - d7
    if a < -x7 then a = -x7 end
    if a >= x7 then
      a = x7
      nd = nd + 1; dels[nd] = KEYS[ki + 8]
    elseif d7 < 0 then
      redis.call('SET', KEYS[ki + 8], pk('<ddd', a, ts, tn), 'KEEPTTL')
    else
      local ms = ceil((x7 - a) * (y7 / am7) / 1000000)
      if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
      redis.call('SET', KEYS[ki + 8], pk('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
    end
  end
  if a > 0 then r7 = floor(a) end
end

local r8 = 0
do
  local ws, wn, el = window(x8, hs8, hn8)
  local wk = KEYS[ki + 9]
  if ws ~= hs8 or wn ~= hn8 then wk = wkey(wk, ws, wn) end
  local a = tonumber(redis.call('GET', wk)) or 0
  if apply and ((ss8 == ws and sn8 == wn) or d8 > 0) then
    local b = bounded(a, d8, am8)
    if b <= 0 then
      if a > 0 then nd = nd + 1; dels[nd] = wk end
    elseif a <= 0 then
      redis.call('SET', wk, dec(b), 'PX', ttl(x8 - el))
    elseif b ~= a then
      redis.call('INCRBY', wk, dec(b - a))
    end
    a = b
  end
  r8 = max(0, am8 - a)
end
return pk('<dddddddd', r1, r2, r3, r4, r5, r6, r7, r8)
end
r = r .. settle0()
local function settle1()
local d9, ss9, sn9, am9, x9, hs9, hn9 = up('<ddddddd', ARGV[1], 441)

local r9 = 0
do
  local ws, wn, el = window(x9, hs9, hn9)
  local a, b = 0, 0
  local v = redis.call('GET', KEYS[ki + 10])
  if v then
    local c, p, ss, sn = up('<dddd', v)
    local d = (ws - ss) * E9 + (wn - sn)
    if d == 0 then a, b = c, p elseif d == x9 then b = c end
  end
  local diff = (ss9 - ws) * E9 + (sn9 - wn)
  local moved = false
  if apply and (diff == 0 or d9 > 0) then
    a, moved = bounded(a, d9, am9), true
  elseif apply and diff == -x9 then
    b, moved = bounded(b, d9, am9), true
  end
  if moved then
    if a > 0 then
      redis.call('SET', KEYS[ki + 10], pk('<dddd', a, b, ws, wn), 'PX', ttl(2 * x9 - el))
    elseif b > 0 then
      redis.call('SET', KEYS[ki + 10], pk('<dddd', a, b, ws, wn), 'PX', ttl(x9 - el))
    else
      nd = nd + 1; dels[nd] = KEYS[ki + 10]
    end
  end
  r9 = max(0, am9 - ceil(b * (1 - el / x9) + a))
end
return pk('<d', r9)
end
r = r .. settle1()
if nd > 0 then redis.call('DEL', unpack(dels, 1, nd)) end
return r
