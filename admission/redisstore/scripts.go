package redisstore

import (
	"strings"

	"github.com/sluicehq/sluice/admission/limits"
)

// The generic scripts take what the lean scripts (lean.go) do not: fixed
// and sliding windows, sliding logs, quotas, and calls mixing them with
// token buckets and concurrency limits. Each is generated for the set of
// algorithms of a call: one prelude, the code of those algorithms only,
// and the acquire or the settle (refund, charge, release) driver.
//
// Time is kept as (seconds, nanoseconds) pairs: a Lua number is a double,
// which holds nanoseconds since the epoch only to 256 ns, while differences
// of pairs are exact. Sorted-set scores (sliding log entries, lease
// expiries) are nanoseconds relative to a base second kept in the
// partition's hash, so they are exact too.
//
// ARGV of an acquire: now_s, now_n ("" and "" for Redis TIME), grace_ms,
// count, then count blocks of opWidth values: alg, shadow, n, p1..p5.
// KEYS: each op's keys in order (one, or two for sliding log and
// concurrency).
//
// ARGV of a settle: now_s, now_n, grace_ms, count, idem_ms, then count
// blocks of settleWidth values: alg, kind (1 adjust, 2 release), delta,
// stamp_s, stamp_n, taken, p1..p5. KEYS: the idempotency key when idem_ms
// is positive, then each op's keys.
//
// Replies are one string of integers separated by spaces: per acquired op
// ok, taken, limit, remaining, reset, retry, stamp_s, stamp_n, expired; per
// settled op the remaining figure. "S now_s now_n" reports that a calendar
// quota's period, computed from the caller's clock, does not hold the
// server's time (the caller recomputes it and calls again).

const (
	opWidth     = 8
	settleWidth = 11
)

const luaPrelude = `
if redis.replicate_commands then redis.replicate_commands() end
local E9 = 1000000000
local NEVER = -1
local MAXD = 4611686018427387903
local function tdiff(as, an, bs, bn) return (as - bs) * E9 + (an - bn) end
local function ceil_ns(x)
  if x <= 0 then return 0 end
  if x > MAXD then return MAXD end
  return math.ceil(x)
end
local function fmt(x) return string.format('%d', x) end
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
local function ttl(ns, grace)
  local ms = math.ceil(ns / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  return fmt(ms + grace)
end
local ALG = {}
`

// luaLeaseScan reclaims the expired leases of a concurrency partition
// and, when its expiries grow large, rebases them on the current second
// s. Given the partition's key, the instant (s, n), its base second b, the
// instant now relative to it, its latest expiry m and cost in flight a, it
// returns the new b, now, m, the earliest expiry left (nil for none), the
// cost in flight and the number of leases reclaimed.
const luaLeaseScan = `
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
`

var luaAlg = map[limits.Algorithm]string{
	limits.TokenBucket: `
local function floor0(x) if x <= 0 then return 0 end return math.floor(x) end
ALG[0] = {nkeys = 1, keep = true}
ALG[0].load = function(o)
  o.cap = o.p2
  o.rate = o.p1 / o.p3
  local v = redis.call('GET', o.k1)
  if v then o.a, o.ts, o.tn = struct.unpack('<ddd', v) else o.a, o.ts, o.tn = o.cap, o.s, o.n end
  local el = tdiff(o.s, o.n, o.ts, o.tn)
  if el > 0 then
    o.a = math.min(o.cap, o.a + el * o.rate)
    o.ts, o.tn = o.s, o.n
  end
  -- The debt bound: never deeper than the capacity.
  if o.a < -o.cap then o.a = -o.cap end
  o.a0 = o.a
  o.dirty = true
end
ALG[0].take = function(o, n, g)
  g.limit = o.cap
  g.ss, g.sn = o.s, o.n
  if n <= o.a then
    o.a = o.a - n
    g.ok, g.taken = 1, n
  elseif n > o.cap then
    g.retry = NEVER
  else
    g.retry = ceil_ns((n - o.a) / o.rate)
  end
  g.rem = floor0(o.a)
  -- Like the in-memory bucket: nanoseconds per token times the missing
  -- tokens (the retry above divides, to stay exact).
  g.reset = ceil_ns((o.cap - o.a) * (o.p3 / o.p1))
end
ALG[0].adjust = function(o, d)
  o.a = math.min(math.max(o.a - d, -o.cap), o.cap)
  return floor0(o.a)
end
ALG[0].save = function(o, grace)
  if o.a >= o.cap then
    redis.call('DEL', o.k1)
  else
    redis.call('SET', o.k1, struct.pack('<ddd', o.a, o.ts, o.tn), 'PX', ttl((o.cap - o.a) * (o.p3 / o.p1), grace))
  end
end
`,
	limits.FixedWindow: `
local function tadd(s, n, d)
  local t = n + d
  local q = math.floor(t / E9)
  local r = t - q * E9
  if r < 0 then q = q - 1; r = r + E9 elseif r >= E9 then q = q + 1; r = r - E9 end
  return s + q, r
end
-- window places the op in the window holding now, starting from the
-- caller's hint (p2 per, p3/p4 window start): exact for any skew below
-- 2^53 ns.
local function window(o, per, hs, hn)
  local el = tdiff(o.s, o.n, hs, hn)
  local ws, wn = hs, hn
  if el < 0 or el >= per then
    local k = math.floor(el / per)
    ws, wn = tadd(hs, hn, k * per)
    el = el - k * per
    while el < 0 do ws, wn = tadd(ws, wn, -per); el = el + per end
    while el >= per do ws, wn = tadd(ws, wn, per); el = el - per end
  end
  o.ws, o.wn, o.el = ws, wn, el
end
ALG[1] = {nkeys = 1}
-- A window hint more than 2^50 ns (13 days) off the server's time could
-- not be moved exactly: the caller recomputes it from the server's time.
local function far(el, per) return el < -1125899906842624 or el >= per + 1125899906842624 end
ALG[1].skew = function(o) return far(tdiff(o.s, o.n, o.p3, o.p4), o.p2) end
-- count_load reads a counting partition (fixed window, quota): its count
-- when it holds the window the op is in (o.ws, o.wn), 0 otherwise.
local function count_load(o)
  o.a = 0
  local v = redis.call('GET', o.k1)
  if v then
    local a, ss, sn = struct.unpack('<ddd', v)
    if ss == o.ws and sn == o.wn then o.a = a end
  end
end
ALG[1].load = function(o)
  window(o, o.p2, o.p3, o.p4)
  count_load(o)
end
-- count_take adds n to a counting partition (fixed window, quota) that ends
-- in reset nanoseconds, when it fits under the limit.
local function count_take(o, n, g, reset)
  local amount = o.p1
  g.limit = amount
  g.ss, g.sn = o.ws, o.wn
  g.reset = reset
  if o.a + n <= amount then
    o.a = o.a + n
    g.ok, g.taken = 1, n
    o.dirty = true
  elseif n > amount then
    g.retry = NEVER
  else
    g.retry = g.reset
  end
  g.rem = amount - math.min(o.a, amount)
end
ALG[1].take = function(o, n, g) count_take(o, n, g, o.p2 - o.el) end
-- bounded changes a count by d within the debt bound of the counting
-- algorithms: a refund lowers it to zero at most, a charge raises it to
-- the limit at most and never lowers it (a count above the limit a ticket
-- was admitted under counts admissions a higher limit let through).
local function bounded(o, x, d)
  if d < 0 then return math.max(x + d, 0) end
  return math.max(x, math.min(x + d, o.p1))
end
ALG[1].adjust = function(o, d, ss, sn)
  if (ss == o.ws and sn == o.wn) or d > 0 then
    o.a = bounded(o, o.a, d)
    o.dirty = true
  end
  return math.max(0, o.p1 - o.a)
end
ALG[1].save = function(o, grace)
  if o.a > 0 then
    redis.call('SET', o.k1, struct.pack('<ddd', o.a, o.ws, o.wn), 'PX', ttl(o.p2 - o.el, grace))
  else
    redis.call('DEL', o.k1)
  end
end
`,
	limits.SlidingWindow: `
ALG[2] = {nkeys = 1}
ALG[2].skew = ALG[1].skew
ALG[2].load = function(o)
  window(o, o.p2, o.p3, o.p4)
  o.a, o.b = 0, 0
  local v = redis.call('GET', o.k1)
  if v then
    local a, b, ss, sn = struct.unpack('<dddd', v)
    local d = tdiff(o.ws, o.wn, ss, sn)
    if d == 0 then o.a, o.b = a, b elseif d == o.p2 then o.b = a end
  end
end
local function sw_est(o)
  local weight = 1 - o.el / o.p2
  return o.b * weight + o.a
end
ALG[2].take = function(o, n, g)
  local amount, per = o.p1, o.p2
  local elapsed = o.el
  local est = sw_est(o)
  local limit = amount
  g.limit = amount
  g.ss, g.sn = o.ws, o.wn
  if est + n <= limit then
    o.a = o.a + n
    est = est + n
    g.ok, g.taken = 1, n
    o.dirty = true
  elseif n > amount then
    g.retry = NEVER
  elseif o.a + n <= limit then
    local e = per * (o.b - (limit - o.a - n)) / o.b
    g.retry = ceil_ns(e - elapsed)
  else
    local e = per * (o.a - (limit - n)) / o.a
    g.retry = ceil_ns(per - elapsed + e)
  end
  g.rem = amount - math.min(math.ceil(est), amount)
  if o.a > 0 then g.reset = ceil_ns(2 * per - elapsed)
  elseif o.b > 0 then g.reset = ceil_ns(per - elapsed) end
end
ALG[2].adjust = function(o, d, ss, sn)
  local diff = tdiff(ss, sn, o.ws, o.wn)
  if diff == 0 or d > 0 then
    o.a = bounded(o, o.a, d)
    o.dirty = true
  elseif diff == -o.p2 then
    o.b = bounded(o, o.b, d)
    o.dirty = true
  end
  return math.max(0, o.p1 - math.ceil(sw_est(o)))
end
ALG[2].save = function(o, grace)
  if o.a > 0 then
    redis.call('SET', o.k1, struct.pack('<dddd', o.a, o.b, o.ws, o.wn), 'PX', ttl(2 * o.p2 - o.el, grace))
  elseif o.b > 0 then
    redis.call('SET', o.k1, struct.pack('<dddd', o.a, o.b, o.ws, o.wn), 'PX', ttl(o.p2 - o.el, grace))
  else
    redis.call('DEL', o.k1)
  end
end
`,
	limits.SlidingLog: `
-- rel loads the base second of a sorted-set partition and the current
-- instant relative to it, rebasing the scores when they grow large.
local function rel(o, base)
  if base == nil then base = o.s end
  o.b = base
  o.now = tdiff(o.s, o.n, base, 0)
  if o.now > 4503599627370496 then
    local shift = (o.s - base) * E9
    local all = redis.call('ZRANGE', o.k2, 0, -1, 'WITHSCORES')
    for i = 1, #all, 2 do
      redis.call('ZADD', o.k2, fmt(tonumber(all[i + 1]) - shift), all[i])
    end
    o.b = o.s
    o.now = o.n
    o.hdirty = true
  end
end
local function mcost(m) return tonumber(string.match(m, ':(%d+)$')) end
local function mseq(m) return tonumber(string.match(m, '^(%d+):')) end
ALG[3] = {nkeys = 2}
ALG[3].load = function(o)
  local h = redis.call('HMGET', o.k1, 'b', 'a', 'q')
  o.a = tonumber(h[2]) or 0
  o.q = tonumber(h[3]) or 0
  rel(o, tonumber(h[1]))
  local horizon = o.now - o.p2
  local old = redis.call('ZRANGEBYSCORE', o.k2, '-inf', fmt(horizon))
  if #old > 0 then
    for i = 1, #old do o.a = o.a - mcost(old[i]) end
    redis.call('ZREMRANGEBYSCORE', o.k2, '-inf', fmt(horizon))
    o.hdirty = true
  end
  o.card = redis.call('ZCARD', o.k2)
  if o.card == 0 then o.a = 0 end
  o.a0, o.q0 = o.a, o.q
end
local function sl_last(o)
  if o.card == 0 then return nil end
  local last = redis.call('ZRANGE', o.k2, -1, -1, 'WITHSCORES')
  return tonumber(last[2])
end
ALG[3].take = function(o, n, g)
  local amount, per = o.p1, o.p2
  g.limit = amount
  g.ss, g.sn = o.s, o.n
  if o.a + n <= amount then
    if n > 0 then
      o.q = o.q + 1
      o.add = o.q .. ':' .. fmt(n)
      o.a = o.a + n
      o.dirty = true
    end
    g.ok, g.taken = 1, n
  elseif n > amount then
    g.retry = NEVER
  else
    local need = o.a + n - amount
    local from = 0
    while need > 0 and from < o.card do
      local es = redis.call('ZRANGE', o.k2, from, from + 127, 'WITHSCORES')
      if #es == 0 then break end
      for i = 1, #es, 2 do
        need = need - mcost(es[i])
        if need <= 0 then
          g.retry = tonumber(es[i + 1]) + per - o.now
          break
        end
      end
      from = from + 128
    end
  end
  g.rem = amount - math.min(o.a, amount)
  if o.add then
    g.reset = per
  else
    local last = sl_last(o)
    if last then g.reset = last + per - o.now end
  end
end
ALG[3].adjust = function(o, d, ss, sn)
  local at = tdiff(ss, sn, o.b, 0)
  local found, seq = nil, -1
  if o.card > 0 then
    local es = redis.call('ZRANGEBYSCORE', o.k2, fmt(at), fmt(at))
    for i = 1, #es do
      local q = mseq(es[i])
      if q > seq then found, seq = es[i], q end
    end
  end
  -- A charge fills the log up to the limit at most (the debt bound).
  local room = math.max(0, o.p1 - o.a)
  if found then
    local cost = mcost(found)
    local dd = math.min(math.max(d, -cost), room)
    redis.call('ZREM', o.k2, found)
    o.card = o.card - 1
    if cost + dd > 0 then
      redis.call('ZADD', o.k2, fmt(at), seq .. ':' .. fmt(cost + dd))
      o.card = o.card + 1
    end
    o.a = o.a + dd
    o.hdirty = true
  elseif math.min(d, room) > 0 then
    d = math.min(d, room)
    o.q = o.q + 1
    o.add = o.q .. ':' .. fmt(d)
    o.a = o.a + d
  end
  o.dirty = true
  return math.max(0, o.p1 - o.a)
end
ALG[3].save = function(o, grace)
  if o.add then
    redis.call('ZADD', o.k2, fmt(o.now), o.add)
    o.card = o.card + 1
  end
  local last = sl_last(o)
  if not last then
    redis.call('DEL', o.k1, o.k2)
    return
  end
  local px = ttl(last + o.p2 - o.now, grace)
  redis.call('HSET', o.k1, 'b', fmt(o.b), 'a', fmt(o.a), 'q', fmt(o.q))
  redis.call('PEXPIRE', o.k1, px)
  redis.call('PEXPIRE', o.k2, px)
end
ALG[3].flush = function(o)
  if o.hdirty and not o.saved then
    if o.card == 0 then
      redis.call('DEL', o.k1, o.k2)
    else
      redis.call('HSET', o.k1, 'b', fmt(o.b), 'a', fmt(o.a0), 'q', fmt(o.q0))
    end
  end
end
`,
	limits.Concurrency: luaLeaseScan + `
-- One hash per partition: a field h holding five float64s (struct) b
-- (base second), a (cost in flight), q (lease counter, see load), e
-- (earliest lease expiry, a lower bound; -1 for none) and m (latest
-- expiry), and a field "l" .. <id as a float64> = <expiry, cost as two
-- float64s> per lease; expiries are nanoseconds from b. a is 0 exactly when
-- no lease is held, as every lease holds a positive cost. Leases are
-- scanned only when one may have expired. Binary fields need no number
-- formatting or parsing.
ALG[4] = {nkeys = 1, lease = true}
local function cc_head(o, a, q)
  local e = o.e
  if e == nil then e = -1 end
  return struct.pack('<ddddd', o.b, a, q, e, o.m)
end
ALG[4].load = function(o)
  local h = redis.call('HGET', o.k1, 'h')
  if h then
    o.b, o.a, o.q, o.e, o.m = struct.unpack('<ddddd', h)
    if o.e < 0 then o.e = nil end
  else
    -- A new partition numbers its leases from the current microsecond,
    -- so that a lease id is never reused after the partition was dropped
    -- (a stale ticket can never release someone else's lease).
    o.b, o.a, o.q, o.e, o.m = o.s, 0, o.s * 1000000 + math.floor(o.n / 1000), nil, 0
  end
  o.now = tdiff(o.s, o.n, o.b, 0)
  o.expired = 0
  if o.a > 0 and (o.e == nil or o.e <= o.now or o.now > 4503599627370496) then
    o.b, o.now, o.m, o.e, o.a, o.expired = lease_scan(o.k1, o.s, o.n, o.b, o.now, o.m, o.a)
    o.hdirty = true
  end
  if o.a <= 0 then o.a, o.e = 0, nil end
  o.a0, o.q0 = o.a, o.q
end
ALG[4].take = function(o, n, g)
  local amount = o.p1
  g.limit = amount
  g.exp = o.expired
  if o.a + n <= amount then
    if n > 0 then
      o.q = o.q + 1
      o.addn = n
      o.a = o.a + n
      o.dirty = true
      g.sn = o.q
    end
    g.ok, g.taken = 1, n
  elseif n > amount then
    g.retry = NEVER
  end
  g.rem = amount - math.min(o.a, amount)
end
ALG[4].save = function(o, grace)
  local exp = o.now + o.p2
  if exp > o.m then o.m = exp end
  if o.e == nil or exp < o.e then o.e = exp end
  redis.call('HSET', o.k1, 'l' .. struct.pack('<d', o.q), struct.pack('<dd', exp, o.addn), 'h', cc_head(o, o.a, o.q))
  redis.call('PEXPIRE', o.k1, ttl(o.m - o.now, grace))
end
ALG[4].flush = function(o)
  if o.hdirty and not o.saved then
    if o.a0 == 0 then
      redis.call('DEL', o.k1)
    else
      redis.call('HSET', o.k1, 'h', cc_head(o, o.a0, o.q0))
    end
  end
end
ALG[4].release = function(o, id, taken)
  local f = 'l' .. struct.pack('<d', id)
  local h = redis.call('HMGET', o.k1, 'h', f)
  local b, a, q, e, m = 0, 0, 0, -1, 0
  if h[1] then b, a, q, e, m = struct.unpack('<ddddd', h[1]) end
  if h[2] then
    a = a - taken
    if a <= 0 then
      a = 0
      redis.call('DEL', o.k1)
    else
      redis.call('HDEL', o.k1, f)
      redis.call('HSET', o.k1, 'h', struct.pack('<ddddd', b, a, q, e, m))
    end
  end
  return math.max(0, o.p1 - a)
end
`,
	limits.Quota: `
ALG[5] = {nkeys = 1}
ALG[5].skew = function(o)
  local el = tdiff(o.s, o.n, o.p2, o.p3)
  if o.p5 == 1 then
    return el < 0 or el >= o.p4
  end
  return far(el, o.p4)
end
ALG[5].load = function(o)
  if o.p5 == 1 then
    o.ws, o.wn, o.el = o.p2, o.p3, tdiff(o.s, o.n, o.p2, o.p3)
  else
    window(o, o.p4, o.p2, o.p3)
  end
  count_load(o)
end
ALG[5].take = function(o, n, g) count_take(o, n, g, o.p4 - o.el) end
ALG[5].adjust = ALG[1].adjust
ALG[5].save = function(o, grace)
  if o.a > 0 then
    redis.call('SET', o.k1, struct.pack('<ddd', o.a, o.ws, o.wn), 'PX', ttl(o.p4 - o.el, grace))
  else
    redis.call('DEL', o.k1)
  end
end
`,
}

// luaNow sets now_s and now_n from the server's TIME, or from the caller's
// instant in ARGV[1] and ARGV[2] (caller-time test mode).
const luaNow = `
local now_s, now_n
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
else
  now_s, now_n = tonumber(ARGV[1]), tonumber(ARGV[2])
end
`

const luaDriver = luaNow + `
local grace = tonumber(ARGV[3])
local count = tonumber(ARGV[4])
`

const luaAcquire = luaDriver + `
local ops = {}
local ki = 1
for i = 1, count do
  local j = 4 + (i - 1) * 8
  local alg = tonumber(ARGV[j + 1])
  local o = {alg = ALG[alg], s = now_s, n = now_n, shadow = ARGV[j + 2] == '1', want = tonumber(ARGV[j + 3]),
    p1 = tonumber(ARGV[j + 4]), p2 = tonumber(ARGV[j + 5]), p3 = tonumber(ARGV[j + 6]),
    p4 = tonumber(ARGV[j + 7]), p5 = tonumber(ARGV[j + 8])}
  o.k1 = KEYS[ki]
  if o.alg.nkeys == 2 then o.k2 = KEYS[ki + 1] end
  ki = ki + o.alg.nkeys
  if o.alg.skew and o.alg.skew(o) then
    return 'S ' .. fmt(now_s) .. ' ' .. fmt(now_n)
  end
  ops[i] = o
end
local fits = true
local gs = {}
for i = 1, count do
  local o = ops[i]
  o.alg.load(o)
  local g = {ok = 0, taken = 0, limit = 0, rem = 0, reset = 0, retry = 0, ss = 0, sn = 0, exp = 0}
  o.alg.take(o, o.want, g)
  if g.ok == 0 and not o.shadow then fits = false end
  gs[i] = g
end
local out = {}
for i = 1, count do
  local o, g = ops[i], gs[i]
  if fits and g.ok == 1 and o.dirty then
    o.alg.save(o, grace)
    o.saved = true
  elseif o.alg.keep then
    o.a = o.a0
    o.alg.save(o, grace)
    o.saved = true
  end
  if not fits then
    g.taken = 0
    if o.alg.lease then g.sn = 0 end
  end
  if o.alg.flush then o.alg.flush(o) end
  out[i] = string.format('%d %d %d %d %d %d %d %d %d', g.ok, g.taken, g.limit, g.rem, g.reset, g.retry, g.ss, g.sn, g.exp)
end
return table.concat(out, ' ')
`

const luaSettle = luaDriver + `
local idem = tonumber(ARGV[5])
local ki = 1
-- A settle already applied (its idempotency key is there: the client
-- retried after losing the reply) applies nothing and reports the figures.
local dup = false
if idem > 0 then
  dup = not redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt(idem))
  ki = 2
end
local ops = {}
for i = 1, count do
  local j = 5 + (i - 1) * 11
  local alg = tonumber(ARGV[j + 1])
  local o = {alg = ALG[alg], s = now_s, n = now_n, kind = tonumber(ARGV[j + 2]), d = tonumber(ARGV[j + 3]),
    ss = tonumber(ARGV[j + 4]), sn = tonumber(ARGV[j + 5]), taken = tonumber(ARGV[j + 6]),
    p1 = tonumber(ARGV[j + 7]), p2 = tonumber(ARGV[j + 8]), p3 = tonumber(ARGV[j + 9]),
    p4 = tonumber(ARGV[j + 10]), p5 = tonumber(ARGV[j + 11])}
  o.k1 = KEYS[ki]
  if o.alg.nkeys == 2 then o.k2 = KEYS[ki + 1] end
  ki = ki + o.alg.nkeys
  if o.kind == 1 and o.alg.skew and o.alg.skew(o) then
    if idem > 0 and not dup then redis.call('DEL', KEYS[1]) end
    return 'S ' .. fmt(now_s) .. ' ' .. fmt(now_n)
  end
  ops[i] = o
end
local out = {}
for i = 1, count do
  local o = ops[i]
  local rem
  if o.kind == 2 then
    rem = o.alg.release(o, o.sn, o.taken)
  else
    o.alg.load(o)
    if dup then o.d = 0 end
    rem = o.alg.adjust(o, o.d, o.ss, o.sn)
    if o.dirty then o.alg.save(o, grace); o.saved = true end
    if o.alg.flush then o.alg.flush(o) end
  end
  out[i] = fmt(rem)
end
return table.concat(out, ' ')
`

// An algSet is the set of algorithms of a generic call, one bit per
// limits.Algorithm.
type algSet uint16

// genGeneric returns the generator of the generic scripts running driver.
func genGeneric(driver string) func(algSet) string {
	return func(set algSet) string {
		if set&(1<<limits.SlidingWindow|1<<limits.Quota) != 0 {
			// The sliding window and the quota share the fixed window's
			// code: window placement, hint check, counting.
			set |= 1 << limits.FixedWindow
		}
		var b strings.Builder
		b.WriteString(luaPrelude)
		for a := limits.TokenBucket; a <= limits.Quota; a++ {
			if set&(1<<a) != 0 {
				b.WriteString(luaAlg[a])
			}
		}
		b.WriteString(driver)
		return b.String()
	}
}

var (
	genericAcquires = &scriptCache[algSet]{gen: genGeneric(luaAcquire)}
	genericSettles  = &scriptCache[algSet]{gen: genGeneric(luaSettle)}
)
