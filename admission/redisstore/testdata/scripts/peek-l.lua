
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, sh1, n1, am1, x1 = up('<dddddddd', ARGV[1])

if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end

local ok1, a1, add1, q1, exp1 = 1, 0, 0, 0, 0
do
  local h = redis.call('HGET', KEYS[1], 'h')
  if h then
    local b, a, q, e, m = up('<ddddd', h)
    local now, shift = (now_s - b) * E9 + now_n, 0
    if a > 0 and (e < 0 or e <= now or now > 4503599627370496) then
      if now > 4503599627370496 then shift, now = (now_s - b) * E9, now_n end
      a = 0
      local all = redis.call('HGETALL', KEYS[1])
      for i = 1, #all, 2 do
        if string.byte(all[i], 1) == 108 then
          local exp, cost = up('<dd', all[i + 1])
          if exp - shift > now then a = a + cost end
        end
      end
    end
    if a > 0 then a1 = a end
  end
end
if a1 > am1 then ok1 = 0 end
return pk('<dddddd', now_s, now_n, ok1, a1, (add1 > 0 and q1 or 0), exp1)
