
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1, hs1, hn1 = up('<dddddddddd', ARGV[1])

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
if far((now_s - hs1) * E9 + (now_n - hn1), x1) then return 'S' .. pk('<dd', now_s, now_n) end
local v1 = redis.call('GET', KEYS[1])

local ws1, wn1, el1 = window(x1, hs1, hn1)
local a1, b1, ok1, rt1, rs1 = 0, 0, 0, 0, 0
if v1 then
  local a, b, ss, sn = up('<dddd', v1)
  local d = (ws1 - ss) * E9 + (wn1 - sn)
  if d == 0 then a1, b1 = a, b elseif d == x1 then b1 = a end
end
local est1 = b1 * (1 - el1 / x1) + a1
if est1 + n1 <= am1 then
  a1, est1, ok1 = a1 + n1, est1 + n1, 1
elseif n1 > am1 then
  rt1 = NEVER
elseif a1 + n1 <= am1 then
  rt1 = ceil_ns(x1 * (b1 - (am1 - a1 - n1)) / b1 - el1)
else
  rt1 = ceil_ns(x1 - el1 + x1 * (a1 - (am1 - n1)) / a1)
end
if a1 > 0 then rs1 = ceil_ns(2 * x1 - el1) elseif b1 > 0 then rs1 = ceil_ns(x1 - el1) end
return pk('<dddddddd', now_s, now_n, ok1, am1 - min(ceil(est1), am1), rs1, rt1, ws1, wn1)
