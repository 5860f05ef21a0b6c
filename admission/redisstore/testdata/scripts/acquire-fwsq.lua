
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1, hs1, hn1, rf1, sh2, n2, am2, x2, hs2, hn2, sh3, n3, am3, x3, sh4, n4, am4, hs4, hn4, x4, cal4 = up('<dddddddddddddddddddddddddddd', ARGV[1])

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
if (now_s - hs1) * E9 + (now_n - hn1) < -1125899906842624 or (now_s - hs1) * E9 + (now_n - hn1) >= x1 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
if far((now_s - hs2) * E9 + (now_n - hn2), x2) then return 'S' .. pk('<dd', now_s, now_n) end
if quota_skew(hs4, hn4, x4, cal4) then return 'S' .. pk('<dd', now_s, now_n) end
local vs = redis.call('MGET', KEYS[2], KEYS[5])
local v2 = vs[1]
local v4 = vs[2]

local ws1, wn1, el1, k1 = hs1, hn1, (now_s - hs1) * E9 + (now_n - hn1), KEYS[1]
if el1 < 0 or el1 >= x1 then
  ws1, wn1, el1 = window(x1, hs1, hn1)
  k1 = wkey(k1, ws1, wn1)
end
local a1, ok1, c1 = 0, 0, 0
if rf1 == 1 or n1 <= 0 or n1 > am1 then a1 = tonumber(redis.call('GET', k1)) or 0 end
if n1 > 0 and n1 <= am1 and (rf1 == 0 or a1 + n1 <= am1) then
  c1 = redis.call('INCRBY', k1, fmt('%d', n1))
  if c1 == n1 then redis.call('PEXPIRE', k1, ttl(x1 - el1)) end
  a1 = c1 - n1
end
if a1 + n1 <= am1 then a1, ok1 = a1 + n1, 1 end

local ws2, wn2, el2 = window(x2, hs2, hn2)
local a2, b2, ok2, rt2, rs2 = 0, 0, 0, 0, 0
if v2 then
  local a, b, ss, sn = up('<dddd', v2)
  local d = (ws2 - ss) * E9 + (wn2 - sn)
  if d == 0 then a2, b2 = a, b elseif d == x2 then b2 = a end
end
local est2 = b2 * (1 - el2 / x2) + a2
if est2 + n2 <= am2 then
  a2, est2, ok2 = a2 + n2, est2 + n2, 1
elseif n2 > am2 then
  rt2 = NEVER
elseif a2 + n2 <= am2 then
  rt2 = ceil_ns(x2 * (b2 - (am2 - a2 - n2)) / b2 - el2)
else
  rt2 = ceil_ns(x2 - el2 + x2 * (a2 - (am2 - n2)) / a2)
end
if a2 > 0 then rs2 = ceil_ns(2 * x2 - el2) elseif b2 > 0 then rs2 = ceil_ns(x2 - el2) end

local b3, now3, a3, q3, c3, hd3 = sl_load(KEYS[3], KEYS[4], x3)
local a03, q03, ok3, rt3, rs3, add3 = a3, q3, 0, 0, 0, nil
if a3 + n3 <= am3 then
  if n3 > 0 then
    q3 = q3 + 1
    add3 = q3 .. ':' .. dec(n3)
    a3 = a3 + n3
  end
  ok3 = 1
elseif n3 > am3 then
  rt3 = NEVER
else
  local need, from = a3 + n3 - am3, 0
  while need > 0 and from < c3 do
    local es = redis.call('ZRANGE', KEYS[4], from, from + 127, 'WITHSCORES')
    if #es == 0 then break end
    for i = 1, #es, 2 do
      need = need - mcost(es[i])
      if need <= 0 then
        rt3 = tonumber(es[i + 1]) + x3 - now3
        break
      end
    end
    from = from + 128
  end
end
if add3 then
  rs3 = x3
else
  local last = sl_last(KEYS[4], c3)
  if last then rs3 = last + x3 - now3 end
end
local ws4, wn4, el4 = quota_place(hs4, hn4, x4, cal4)

local a4, ok4, rt4 = 0, 0, 0
if v4 then
  local a, ss, sn = up('<ddd', v4)
  if ss == ws4 and sn == wn4 then a4 = a end
end
local rs4 = x4 - el4
if a4 + n4 <= am4 then
  a4, ok4 = a4 + n4, 1
elseif n4 > am4 then
  rt4 = NEVER
else
  rt4 = rs4
end
local fits = (ok1 == 1 or sh1 == 1) and (ok2 == 1 or sh2 == 1) and (ok3 == 1 or sh3 == 1) and (ok4 == 1 or sh4 == 1)

if c1 > 0 and not (fits and ok1 == 1) then
  if redis.call('DECRBY', k1, dec(n1)) <= 0 then redis.call('DEL', k1) end
end

if fits and ok2 == 1 then
  if a2 > 0 then
    redis.call('SET', KEYS[2], pk('<dddd', a2, b2, ws2, wn2), 'PX', ttl(2 * x2 - el2))
  elseif b2 > 0 then
    redis.call('SET', KEYS[2], pk('<dddd', a2, b2, ws2, wn2), 'PX', ttl(x2 - el2))
  else
    redis.call('DEL', KEYS[2])
  end
end

if fits and add3 then
  redis.call('ZADD', KEYS[4], dec(now3), add3)
  sl_save(KEYS[3], KEYS[4], x3, b3, now3, a3, q3, c3 + 1)
elseif hd3 then
  if c3 == 0 then
    redis.call('DEL', KEYS[3], KEYS[4])
  else
    redis.call('HSET', KEYS[3], 'b', dec(b3), 'a', dec(a03), 'q', dec(q03))
  end
end

if fits and ok4 == 1 then
  if a4 > 0 then
    redis.call('SET', KEYS[5], pk('<ddd', a4, ws4, wn4), 'PX', ttl(x4 - el4))
  else
    redis.call('DEL', KEYS[5])
  end
end
return pk('<dddddddddddddddddddd', now_s, now_n, ok1, a1, ok2, am2 - min(ceil(est2), am2), rs2, rt2, ws2, wn2, ok3, am3 - min(a3, am3), rs3, rt3, ok4, am4 - min(a4, am4), rs4, rt4, ws4, wn4)
