
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki, d1, ss1, sn1, am1, x1, hs1, hn1 = up('<dddddddddddddddd', ARGV[1])

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

local function bounded(x, d, am)
  if d < 0 then return max(x + d, 0) end
  return max(x, min(x + d, am))
end

local function wkey(key, s, n)
  local base = string.match(key, '^(.*)@')
  if n == 0 then return base .. '@' .. fmt('%d', s) end
  return base .. '@' .. fmt('%d.%09d', s, n)
end
if (now_s - hs1) * E9 + (now_n - hn1) < -1125899906842624 or (now_s - hs1) * E9 + (now_n - hn1) >= x1 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end
local apply = true

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
      if a > 0 then redis.call('DEL', wk) end
    elseif a <= 0 then
      redis.call('SET', wk, dec(b), 'PX', ttl(x1 - el))
    elseif b ~= a then
      redis.call('INCRBY', wk, dec(b - a))
    end
    a = b
  end
  r1 = max(0, am1 - a)
end
local r = pk('<d', r1)
return r
