
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

local b1, a1, q1, e1, m1
do
  local h = redis.call('HGET', KEYS[1], 'h')
  if h then
    b1, a1, q1, e1, m1 = up('<ddddd', h)
    if e1 < 0 then e1 = nil end
  else
    b1, a1, q1, m1 = now_s, 0, now_s * 1000000 + floor(now_n / 1000), 0
  end
end
local now1 = (now_s - b1) * E9 + now_n
local exp1, hd1 = 0, false
if a1 > 0 and (e1 == nil or e1 <= now1 or now1 > 4503599627370496) then
  b1, now1, m1, e1, a1, exp1 = lease_scan(KEYS[1], now_s, now_n, b1, now1, m1, a1)
  hd1 = true
end
if a1 <= 0 then a1, e1 = 0, nil end
local a01, q01, ok1, add1 = a1, q1, 0, 0
if a1 + n1 <= am1 then
  if n1 > 0 then q1, add1, a1 = q1 + 1, n1, a1 + n1 end
  ok1 = 1
end
local fits = (ok1 == 1 or sh1 == 1)

if fits and add1 > 0 then
  local exp, e, m = now1 + x1, e1, m1
  if exp > m then m = exp end
  if e == nil or exp < e then e = exp end
  redis.call('HSET', KEYS[1], pk('<c1d', 'l', q1), pk('<dd', exp, add1), 'h', pk('<ddddd', b1, a1, q1, e, m))
  local ms = ceil((m - now1) / 1000000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[1], fmt('%d', ms + grace))
elseif hd1 then
  if a01 == 0 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'h', pk('<ddddd', b1, a01, q01, e1 or -1, m1))
  end
end
return pk('<dddddd', now_s, now_n, ok1, a1, (add1 > 0 and q1 or 0), exp1)
