
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki, d1, ss1, sn1, am1, x1 = up('<dddddddddddddd', ARGV[1])

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
local apply = true

if idem > 0 then
  if ki == 0 then return 'K' end
  apply = redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) ~= false
end

local r1 = 0
do
  local h, z = KEYS[ki + 1], KEYS[ki + 2]
  local b, now, a, q, card, dirty = sl_load(h, z, x1)
  if apply then
    local at = (ss1 - b) * E9 + sn1
    local found, seq = nil, -1
    if card > 0 then
      local es = redis.call('ZRANGEBYSCORE', z, dec(at), dec(at))
      for i = 1, #es do
        local s = mseq(es[i])
        if s > seq then found, seq = es[i], s end
      end
    end
    local room, d = max(0, am1 - a), d1
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
    sl_save(h, z, x1, b, now, a, q, card)
  elseif dirty then
    if card == 0 then
      redis.call('DEL', h, z)
    else
      redis.call('HSET', h, 'b', dec(b), 'a', dec(a), 'q', dec(q))
    end
  end
  r1 = max(0, am1 - a)
end
local r = pk('<d', r1)
return r
