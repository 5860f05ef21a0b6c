
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki, d1, ss1, sn1, am1, x1, hs1, hn1, d2, ss2, sn2, am2, x2, hs2, hn2, d3, ss3, sn3, am3, x3, d4, ss4, sn4, am4, hs4, hn4, x4, cal4 = up('<dddddddddddddddddddddddddddddddddddd', ARGV[1])

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
if (now_s - hs1) * E9 + (now_n - hn1) < -1125899906842624 or (now_s - hs1) * E9 + (now_n - hn1) >= x1 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
if far((now_s - hs2) * E9 + (now_n - hn2), x2) then return 'S' .. pk('<dd', now_s, now_n) end
if quota_skew(hs4, hn4, x4, cal4) then return 'S' .. pk('<dd', now_s, now_n) end
local apply = true
local dels, nd = {}, 0

if idem > 0 then
  if ki == 0 then return 'K' end
  apply = redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) ~= false
end

local r1 = 0
do
  local ws, wn, el = window(x1, hs1, hn1)
  local wk = KEYS[ki + 1]
  if ws ~= hs1 or wn ~= hn1 then wk = wkey(wk, ws, wn) end
  local a = tonumber(redis.call('GET', wk)) or 0
  if apply and ((ss1 == ws and sn1 == wn) or d1 > 0) then
    local b = bounded(a, d1, am1)
    if b <= 0 then
      if a > 0 then nd = nd + 1; dels[nd] = wk end
    elseif a <= 0 then
      redis.call('SET', wk, dec(b), 'PX', ttl(x1 - el))
    elseif b ~= a then
      redis.call('INCRBY', wk, dec(b - a))
    end
    a = b
  end
  r1 = max(0, am1 - a)
end

local r2 = 0
do
  local ws, wn, el = window(x2, hs2, hn2)
  local a, b = 0, 0
  local v = redis.call('GET', KEYS[ki + 2])
  if v then
    local c, p, ss, sn = up('<dddd', v)
    local d = (ws - ss) * E9 + (wn - sn)
    if d == 0 then a, b = c, p elseif d == x2 then b = c end
  end
  local diff = (ss2 - ws) * E9 + (sn2 - wn)
  local moved = false
  if apply and (diff == 0 or d2 > 0) then
    a, moved = bounded(a, d2, am2), true
  elseif apply and diff == -x2 then
    b, moved = bounded(b, d2, am2), true
  end
  if moved then
    if a > 0 then
      redis.call('SET', KEYS[ki + 2], pk('<dddd', a, b, ws, wn), 'PX', ttl(2 * x2 - el))
    elseif b > 0 then
      redis.call('SET', KEYS[ki + 2], pk('<dddd', a, b, ws, wn), 'PX', ttl(x2 - el))
    else
      nd = nd + 1; dels[nd] = KEYS[ki + 2]
    end
  end
  r2 = max(0, am2 - ceil(b * (1 - el / x2) + a))
end

local r3 = 0
do
  local h, z = KEYS[ki + 3], KEYS[ki + 4]
  local b, now, a, q, card, dirty = sl_load(h, z, x3)
  if apply then
    local at = (ss3 - b) * E9 + sn3
    local found, seq = nil, -1
    if card > 0 then
      local es = redis.call('ZRANGEBYSCORE', z, dec(at), dec(at))
      for i = 1, #es do
        local s = mseq(es[i])
        if s > seq then found, seq = es[i], s end
      end
    end
    local room, d = max(0, am3 - a), d3
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
    sl_save(h, z, x3, b, now, a, q, card)
  elseif dirty then
    if card == 0 then
      redis.call('DEL', h, z)
    else
      redis.call('HSET', h, 'b', dec(b), 'a', dec(a), 'q', dec(q))
    end
  end
  r3 = max(0, am3 - a)
end
local r4 = 0
do
  local ws, wn, el = quota_place(hs4, hn4, x4, cal4)

  local a = 0
  local v = redis.call('GET', KEYS[ki + 5])
  if v then
    local c, s, n = up('<ddd', v)
    if s == ws and n == wn then a = c end
  end
  if apply and ((ss4 == ws and sn4 == wn) or d4 > 0) then
    a = bounded(a, d4, am4)
    if a > 0 then
      redis.call('SET', KEYS[ki + 5], pk('<ddd', a, ws, wn), 'PX', ttl(x4 - el))
    else
      nd = nd + 1; dels[nd] = KEYS[ki + 5]
    end
  end
  r4 = max(0, am4 - a)
end
local r = pk('<dddd', r1, r2, r3, r4)
if nd > 0 then redis.call('DEL', unpack(dels, 1, nd)) end
return r
