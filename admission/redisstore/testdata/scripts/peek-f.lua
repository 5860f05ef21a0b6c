
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1, hs1, hn1, rf1 = up('<ddddddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
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

local function wkey(key, s, n)
  local base = string.match(key, '^(.*)@')
  if n == 0 then return base .. '@' .. fmt('%d', s) end
  return base .. '@' .. fmt('%d.%09d', s, n)
end
if (now_s - hs1) * E9 + (now_n - hn1) < -1125899906842624 or (now_s - hs1) * E9 + (now_n - hn1) >= x1 + 1125899906842624 then return 'S' .. pk('<dd', now_s, now_n) end

local ws1, wn1, el1, k1 = hs1, hn1, (now_s - hs1) * E9 + (now_n - hn1), KEYS[1]
if el1 < 0 or el1 >= x1 then
  ws1, wn1, el1 = window(x1, hs1, hn1)
  k1 = wkey(k1, ws1, wn1)
end
local a1 = tonumber(redis.call('GET', k1)) or 0
local ok1 = 1
if a1 > am1 then ok1 = 0 end
return pk('<dddd', now_s, now_n, ok1, a1)
