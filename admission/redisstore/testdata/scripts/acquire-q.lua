
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, hs1, hn1, x1, cal1 = up('<ddddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end

local NEVER = -1

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
if quota_skew(hs1, hn1, x1, cal1) then return 'S' .. pk('<dd', now_s, now_n) end
local v1 = redis.call('GET', KEYS[1])
local ws1, wn1, el1 = quota_place(hs1, hn1, x1, cal1)

local a1, ok1, rt1 = 0, 0, 0
if v1 then
  local a, ss, sn = up('<ddd', v1)
  if ss == ws1 and sn == wn1 then a1 = a end
end
local rs1 = x1 - el1
if a1 + n1 <= am1 then
  a1, ok1 = a1 + n1, 1
elseif n1 > am1 then
  rt1 = NEVER
else
  rt1 = rs1
end
local fits = (ok1 == 1 or sh1 == 1)

if fits and ok1 == 1 then
  if a1 > 0 then
    redis.call('SET', KEYS[1], pk('<ddd', a1, ws1, wn1), 'PX', ttl(x1 - el1))
  else
    redis.call('DEL', KEYS[1])
  end
end
return pk('<dddddddd', now_s, now_n, ok1, am1 - min(a1, am1), rs1, rt1, ws1, wn1)
