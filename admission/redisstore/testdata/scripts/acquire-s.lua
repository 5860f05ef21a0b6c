
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

local NEVER = -1

local function dec(x) return fmt('%d', x) end

local function ttl(ns)
  local ms = ceil(ns / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  return dec(ms + grace)
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

local b1, now1, a1, q1, c1, hd1 = sl_load(KEYS[1], KEYS[2], x1)
local a01, q01, ok1, rt1, rs1, add1 = a1, q1, 0, 0, 0, nil
if a1 + n1 <= am1 then
  if n1 > 0 then
    q1 = q1 + 1
    add1 = q1 .. ':' .. dec(n1)
    a1 = a1 + n1
  end
  ok1 = 1
elseif n1 > am1 then
  rt1 = NEVER
else
  local need, from = a1 + n1 - am1, 0
  while need > 0 and from < c1 do
    local es = redis.call('ZRANGE', KEYS[2], from, from + 127, 'WITHSCORES')
    if #es == 0 then break end
    for i = 1, #es, 2 do
      need = need - mcost(es[i])
      if need <= 0 then
        rt1 = tonumber(es[i + 1]) + x1 - now1
        break
      end
    end
    from = from + 128
  end
end
if add1 then
  rs1 = x1
else
  local last = sl_last(KEYS[2], c1)
  if last then rs1 = last + x1 - now1 end
end
local fits = (ok1 == 1 or sh1 == 1)

if fits and add1 then
  redis.call('ZADD', KEYS[2], dec(now1), add1)
  sl_save(KEYS[1], KEYS[2], x1, b1, now1, a1, q1, c1 + 1)
elseif hd1 then
  if c1 == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    redis.call('HSET', KEYS[1], 'b', dec(b1), 'a', dec(a01), 'q', dec(q01))
  end
end
return pk('<dddddd', now_s, now_n, ok1, am1 - min(a1, am1), rs1, rt1)
