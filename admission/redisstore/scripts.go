package redisstore

//go:generate go test -run ^TestScriptsCurrent$ -update .

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/admission/limits"
)

// Every call runs one script, generated for the call's exact sequence of
// algorithms from the one Lua description of each algorithm below
// (algLua): straight-line code, no loops over ops, no per-op tables, no
// function tables, one binary argument and one binary reply. The
// generator (genAcquire, genSettle) only names each op's locals, its
// keys and its arguments, and strings the parts together.
//
// Time is kept as (seconds, nanoseconds) pairs: a Lua number is a double,
// which holds nanoseconds since the epoch only to 256 ns, while differences
// of pairs are exact. Sorted-set scores (sliding log entries) and lease
// expiries are nanoseconds relative to a base second kept in the
// partition's hash, so they are exact too.
//
// The argument is one binary string, ARGV[1], of little-endian float64s
// (every figure the scripts use is an integer below 2^53, or a quotient
// they compute as memory does), and so is the reply: no figure of a call
// is parsed or formatted on either side (a sliding log's scores and
// entries stay decimal text, as sorted sets want them).
//
// Acquire: clock (0 for Redis TIME, 1 for the caller's instant), now_s,
// now_n, grace_ms, then each op's arguments (algLua.acquireArgs). KEYS:
// each op's keys in order (two for a sliding log, one otherwise). The
// reply is now_s, now_n, then each op's figures (algLua.reply); the caller
// derives the others (see grants).
//
// Settle: clock (2 when no op adjusts: a release does not need the time),
// now_s, now_n, grace_ms, idem_ms, mark, t0_s, t0_n, keyed, then each
// op's arguments (algLua.settleArgs). KEYS: the idempotency key when keyed
// is 1, then each op's keys. The reply is the remaining figure of each
// op, or "K" when the settle needs an idempotency key it was not given.
//
// Peek: an acquire's arguments and reply, for one op of zero permits; the
// script reads only (genPeek).
//
// A reply of 'S' and two float64s (now_s, now_n: 17 bytes, which no other
// reply is long) says that a window or quota period computed from the
// caller's clock does not hold the server's time: the caller computes it
// again from the server's and calls again.
//
// A settle that adjusts a count must apply once even when the client
// sends it again after losing the reply. The idempotency key records that
// it was applied, except when it also releases a lease that cannot have
// expired by the time a retry runs: the lease's absence then says the same
// thing at no cost, and the caller sends no key. mark is 1 when t0 is the
// instant the batch was admitted (a token bucket's stamp), which the
// settle's first lease was taken at: that lease lives until t0 + max hold,
// and retries run within idem_ms of each other (as the idempotency key's
// own expiry assumes). A settle already applied writes nothing but the
// removal of expired state and reports the current figures.
//
// A Lua function has at most 200 locals, and an op up to about 20: a call
// of more than chunkMax ops is cut into chunks of chunkMax, each a
// function of its own. An acquire's chunks nest (each takes its ops,
// calls the next with whether all so far fit, and writes its ops once the
// last has answered), so the batch stays all or nothing; its window
// checks all run first, before any write. A settle's chunks run in turn,
// and use the idempotency key (mark is 0).

// chunkMax is the most ops one Lua function of a script holds.
const chunkMax = 8

const (
	clockServer   = 0
	clockCaller   = 1
	clockUnneeded = 2
)

// prelude starts every script. (Redis before 5 replicates a script's
// effects only when asked: the scripts read TIME, then write.)
const prelude = `
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor, min, max = struct.unpack, struct.pack, string.format, math.ceil, math.floor, math.min, math.max
local E9 = 1000000000
-- MAXTTL bounds an expiry in milliseconds (about 35,000 years): a bucket
-- refilling a huge burst slowly would otherwise ask for an expiry Redis
-- refuses.
local MAXTTL = 1125899906842624
`

const luaTime = `
if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
`

// The helpers, each defined once in a script whose code calls it (see
// withHelpers), by the name helperOrder gives them.
var luaHelpers = map[string]string{
	"never": `
local NEVER = -1
`,
	"ceil_ns": `
local MAXD = 4611686018427387903
local function ceil_ns(x)
  if x <= 0 then return 0 end
  if x > MAXD then return MAXD end
  return ceil(x)
end
`,
	"dec": `
local function dec(x) return fmt('%d', x) end
`,
	"ttl": `
local function ttl(ns)
  local ms = ceil(ns / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  return dec(ms + grace)
end
`,
	// window places an op in the window of length per holding now,
	// starting from the caller's hint (hs, hn): exact for any skew below
	// 2^53 ns. A hint more than 2^50 ns (13 days) off the server's time
	// could not be moved exactly: far says so, and the caller recomputes
	// it from the server's time.
	// (tadd, which moves a window, is defined only when one moves: a
	// definition costs a closure.)
	"window": `
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
`,
	"far": `
local function far(el, per) return el < -1125899906842624 or el >= per + 1125899906842624 end
`,
	// The quota places its period with window.
	"quota_place": `
local function quota_place(ps, pn, len, cal)
  if cal == 1 then return ps, pn, (now_s - ps) * E9 + (now_n - pn) end
  return window(len, ps, pn)
end
`,
	"quota_skew": `
local function quota_skew(ps, pn, len, cal)
  local el = (now_s - ps) * E9 + (now_n - pn)
  if cal == 1 then return el < 0 or el >= len end
  return far(el, len)
end
`,
	// bounded changes a count x by d within the debt bound of the
	// counting algorithms: a refund lowers it to zero at most, a charge
	// raises it to the limit am at most and never lowers it (a count
	// above the limit a ticket was admitted under counts admissions a
	// higher limit let through).
	"bounded": `
local function bounded(x, d, am)
  if d < 0 then return max(x + d, 0) end
  return max(x, min(x + d, am))
end
`,
	// sl_load reads a sliding log (hash h, sorted set z): its base
	// second, the instant relative to it (rebasing the scores when they
	// grow large), its sum and counter without the entries that left the
	// window, which it removes, its entry count, and whether the hash
	// needs writing.
	"log": `
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
`,
	// wkey names the key of the count of the window starting at (s, n)
	// from the key of another window of the same partition: the
	// partition's key, '@' and the window's start (Go's appendWindow).
	// The name keeps the partition's hash tag, so its slot.
	"wkey": `
local function wkey(key, s, n)
  local base = string.match(key, '^(.*)@')
  if n == 0 then return base .. '@' .. fmt('%d', s) end
  return base .. '@' .. fmt('%d.%09d', s, n)
end
`,
	"lease": luaLeaseScan,
}

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

// An algLua is the Lua of one algorithm, its parts written for op $ (its
// arguments and locals end in $), whose keys are KEYS[{k}] and KEYS[{z}] in
// an acquire, KEYS[ki + {k}] and KEYS[ki + {z}] in a settle.
type algLua struct {
	nkeys int
	// get says its state is one string, read with the other ops' in one
	// MGET into v$.
	get bool
	// acquireArgs names its acquire arguments; sh$ (1 for a shadow op)
	// and n$ (the permits asked) come first.
	acquireArgs string
	// skew, if set, is a condition true when the window or period
	// computed from the caller's clock is too far from the server's time
	// (acquire and settle: its arguments are named alike in both).
	skew string
	// take decides the op and sets ok$ (1 when it fits); save writes it
	// back, knowing whether the whole batch fits.
	take, save string
	// reply lists the figures of the acquire reply.
	reply []string
	// settleArgs names its settle arguments; settle adjusts the op (by
	// d$, when apply) or releases its lease, and sets its remaining
	// figure r$.
	settleArgs, settle string
	// peek, if set, is what a peek runs instead of take (whose reads
	// also write: dropping a log's old entries, reclaiming leases): it
	// sets the locals reply lists, as take would for zero permits, with
	// reads only.
	peek string
}

// luaAlg describes every algorithm, in the order of limits.Algorithm.
var luaAlg = [...]algLua{
	limits.TokenBucket: {
		nkeys: 1, get: true,
		acquireArgs: "sh$, n$, am$, x$, y$", // amount, capacity, per
		// The bucket refills, then n$ is taken from it. The reply carries
		// what is left, a$: the caller derives the figures
		// (backend.BucketFigures).
		take: `
local a$, ts$, tn$ = x$, now_s, now_n
if v$ then a$, ts$, tn$ = up('<ddd', v$) end
do
  local el = (now_s - ts$) * E9 + (now_n - tn$)
  if el > 0 then
    local f = a$ + el * (am$ / y$)
    if f < x$ then a$ = f else a$ = x$ end
    ts$, tn$ = now_s, now_n
  end
end
if a$ < -x$ then a$ = -x$ elseif a$ > x$ then a$ = x$ end
local a0$, ok$ = a$, 0
if n$ <= a$ then a$, ok$ = a$ - n$, 1 end
`,
		// What it took when the batch fits, its refill otherwise; a full
		// bucket is deleted. Only taking permits moves the instant a
		// bucket is full again later: a refill keeps the key's expiry, set
		// when permits were last taken (the same holds for a refund).
		save: `
if fits and ok$ == 1 and n$ > 0 then
  local ms = ceil((x$ - a$) * (y$ / am$) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[{k}], pk('<ddd', a$, ts$, tn$), 'PX', fmt('%d', ms + grace))
elseif a0$ >= x$ then
  if v$ then redis.call('DEL', KEYS[{k}]) end
else
  redis.call('SET', KEYS[{k}], pk('<ddd', a0$, ts$, tn$), 'KEEPTTL')
end
`,
		reply:      []string{"ok$", "a$"},
		settleArgs: "d$, am$, x$, y$",
		settle: `
local r$ = 0
do
  local a, ts, tn = x$, now_s, now_n
  local v = redis.call('GET', KEYS[ki + {k}])
  if v then a, ts, tn = up('<ddd', v) end
  local el = (now_s - ts) * E9 + (now_n - tn)
  if el > 0 then
    local f = a + el * (am$ / y$)
    if f < x$ then a = f else a = x$ end
    ts, tn = now_s, now_n
  end
  if a < -x$ then a = -x$ elseif a > x$ then a = x$ end
  if apply then
    a = a - d$
    if a < -x$ then a = -x$ end
    if a >= x$ then
      a = x$
      redis.call('DEL', KEYS[ki + {k}])
    elseif d$ < 0 then
      redis.call('SET', KEYS[ki + {k}], pk('<ddd', a, ts, tn), 'KEEPTTL')
    else
      local ms = ceil((x$ - a) * (y$ / am$) / 1000000)
      if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
      redis.call('SET', KEYS[ki + {k}], pk('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
    end
  end
  if a > 0 then r$ = floor(a) end
end
`,
	},
	limits.FixedWindow: {
		// A count per window, an integer in a key of its own named after
		// the window (wkey): taking is one INCRBY, which a batch that does
		// not fit gives back (see fwTake).
		nkeys: 1,
		// amount, per, the window's start (hint), 1 to read the count
		// before taking (see fwTake)
		acquireArgs: "sh$, n$, am$, x$, hs$, hn$, rf$",
		// far, written out: a fixed window's take calls no function when
		// the server's time is in the caller's window.
		skew: "(now_s - hs$) * E9 + (now_n - hn$) < -1125899906842624 or (now_s - hs$) * E9 + (now_n - hn$) >= x$ + 1125899906842624",
		take: fwTake,
		// The take's figures for zero permits, with a read only.
		peek: fwPlace + `
local a$ = tonumber(redis.call('GET', k$)) or 0
local ok$ = 1
if a$ > am$ then ok$ = 0 end
`,
		save: `
if c$ > 0 and not (fits and ok$ == 1) then
  if redis.call('DECRBY', k$, dec(n$)) <= 0 then redis.call('DEL', k$) end
end
`,
		// Whether it fits and the count (after the take when it fits,
		// before otherwise): the caller derives the other figures from
		// the server's instant (see fillGrants), the window being the one
		// holding it.
		reply:      []string{"ok$", "a$"},
		settleArgs: "d$, ss$, sn$, am$, x$, hs$, hn$",
		// The adjustment applies to the current window's count when it is
		// the ticket's (a charge applies to it in any case).
		settle: `
local r$ = 0
do
  local ws, wn, el = window(x$, hs$, hn$)
  local wk = KEYS[ki + {k}]
  if ws ~= hs$ or wn ~= hn$ then wk = wkey(wk, ws, wn) end
  local a = tonumber(redis.call('GET', wk)) or 0
  if apply and ((ss$ == ws and sn$ == wn) or d$ > 0) then
    local b = bounded(a, d$, am$)
    if b <= 0 then
      if a > 0 then redis.call('DEL', wk) end
    elseif a <= 0 then
      redis.call('SET', wk, dec(b), 'PX', ttl(x$ - el))
    elseif b ~= a then
      redis.call('INCRBY', wk, dec(b - a))
    end
    a = b
  end
  r$ = max(0, am$ - a)
end
`,
	},
	limits.SlidingWindow: {
		nkeys: 1, get: true,
		acquireArgs: "sh$, n$, am$, x$, hs$, hn$",
		skew:        "far((now_s - hs$) * E9 + (now_n - hn$), x$)",
		// The current window's count a$ and the previous one's b$; the
		// estimate weighs b$ by the part of the previous window still in
		// the sliding one.
		take: `
local ws$, wn$, el$ = window(x$, hs$, hn$)
local a$, b$, ok$, rt$, rs$ = 0, 0, 0, 0, 0
if v$ then
  local a, b, ss, sn = up('<dddd', v$)
  local d = (ws$ - ss) * E9 + (wn$ - sn)
  if d == 0 then a$, b$ = a, b elseif d == x$ then b$ = a end
end
local est$ = b$ * (1 - el$ / x$) + a$
if est$ + n$ <= am$ then
  a$, est$, ok$ = a$ + n$, est$ + n$, 1
elseif n$ > am$ then
  rt$ = NEVER
elseif a$ + n$ <= am$ then
  rt$ = ceil_ns(x$ * (b$ - (am$ - a$ - n$)) / b$ - el$)
else
  rt$ = ceil_ns(x$ - el$ + x$ * (a$ - (am$ - n$)) / a$)
end
if a$ > 0 then rs$ = ceil_ns(2 * x$ - el$) elseif b$ > 0 then rs$ = ceil_ns(x$ - el$) end
`,
		save: `
if fits and ok$ == 1 then
  if a$ > 0 then
    redis.call('SET', KEYS[{k}], pk('<dddd', a$, b$, ws$, wn$), 'PX', ttl(2 * x$ - el$))
  elseif b$ > 0 then
    redis.call('SET', KEYS[{k}], pk('<dddd', a$, b$, ws$, wn$), 'PX', ttl(x$ - el$))
  else
    redis.call('DEL', KEYS[{k}])
  end
end
`,
		reply:      []string{"ok$", "am$ - min(ceil(est$), am$)", "rs$", "rt$", "ws$", "wn$"},
		settleArgs: "d$, ss$, sn$, am$, x$, hs$, hn$",
		settle: `
local r$ = 0
do
  local ws, wn, el = window(x$, hs$, hn$)
  local a, b = 0, 0
  local v = redis.call('GET', KEYS[ki + {k}])
  if v then
    local c, p, ss, sn = up('<dddd', v)
    local d = (ws - ss) * E9 + (wn - sn)
    if d == 0 then a, b = c, p elseif d == x$ then b = c end
  end
  local diff = (ss$ - ws) * E9 + (sn$ - wn)
  local moved = false
  if apply and (diff == 0 or d$ > 0) then
    a, moved = bounded(a, d$, am$), true
  elseif apply and diff == -x$ then
    b, moved = bounded(b, d$, am$), true
  end
  if moved then
    if a > 0 then
      redis.call('SET', KEYS[ki + {k}], pk('<dddd', a, b, ws, wn), 'PX', ttl(2 * x$ - el))
    elseif b > 0 then
      redis.call('SET', KEYS[ki + {k}], pk('<dddd', a, b, ws, wn), 'PX', ttl(x$ - el))
    else
      redis.call('DEL', KEYS[ki + {k}])
    end
  end
  r$ = max(0, am$ - ceil(b * (1 - el / x$) + a))
end
`,
	},
	limits.SlidingLog: {
		nkeys:       2,
		acquireArgs: "sh$, n$, am$, x$", // amount, per
		// Entries are "<seq>:<cost>" scored by their instant (ns from the
		// base second b$), at most one per admitted permit; the hash holds
		// b$, the sum a$ and the counter q$.
		take: `
local b$, now$, a$, q$, c$, hd$ = sl_load(KEYS[{k}], KEYS[{z}], x$)
local a0$, q0$, ok$, rt$, rs$, add$ = a$, q$, 0, 0, 0, nil
if a$ + n$ <= am$ then
  if n$ > 0 then
    q$ = q$ + 1
    add$ = q$ .. ':' .. dec(n$)
    a$ = a$ + n$
  end
  ok$ = 1
elseif n$ > am$ then
  rt$ = NEVER
else
  local need, from = a$ + n$ - am$, 0
  while need > 0 and from < c$ do
    local es = redis.call('ZRANGE', KEYS[{z}], from, from + 127, 'WITHSCORES')
    if #es == 0 then break end
    for i = 1, #es, 2 do
      need = need - mcost(es[i])
      if need <= 0 then
        rt$ = tonumber(es[i + 1]) + x$ - now$
        break
      end
    end
    from = from + 128
  end
end
if add$ then
  rs$ = x$
else
  local last = sl_last(KEYS[{z}], c$)
  if last then rs$ = last + x$ - now$ end
end
`,
		save: `
if fits and add$ then
  redis.call('ZADD', KEYS[{z}], dec(now$), add$)
  sl_save(KEYS[{k}], KEYS[{z}], x$, b$, now$, a$, q$, c$ + 1)
elseif hd$ then
  if c$ == 0 then
    redis.call('DEL', KEYS[{k}], KEYS[{z}])
  else
    redis.call('HSET', KEYS[{k}], 'b', dec(b$), 'a', dec(a0$), 'q', dec(q0$))
  end
end
`,
		reply: []string{"ok$", "am$ - min(a$, am$)", "rs$", "rt$"},
		// The sum without the entries that left the window, counted, not
		// removed; the reset is the newest entry's, if any is left. (now
		// is exact below 2^53 ns from the base second, which every write
		// past 2^52 moves: 52 days with no write and a window longer
		// still. An entry is "<seq>:<cost>": the pattern needs no anchor,
		// which the generator's $ would take.)
		peek: `
local a$, ok$, rt$, rs$ = 0, 1, 0, 0
do
  local v = redis.call('HMGET', KEYS[{k}], 'b', 'a')
  local b = tonumber(v[1])
  if b then
    local now = (now_s - b) * E9 + now_n
    a$ = tonumber(v[2]) or 0
    local old = redis.call('ZRANGEBYSCORE', KEYS[{z}], '-inf', dec(now - x$))
    for i = 1, #old do a$ = a$ - tonumber(string.match(old[i], ':(%d+)')) end
    if redis.call('ZCARD', KEYS[{z}]) > #old then
      rs$ = tonumber(redis.call('ZRANGE', KEYS[{z}], -1, -1, 'WITHSCORES')[2]) + x$ - now
    else
      a$ = 0
    end
  end
end
if a$ > am$ then ok$ = 0 end
`,
		settleArgs: "d$, ss$, sn$, am$, x$",
		// The adjustment applies to the ticket's entry (its stamp's
		// instant, the highest sequence there); a charge fills the log up
		// to the limit at most (the debt bound).
		settle: `
local r$ = 0
do
  local h, z = KEYS[ki + {k}], KEYS[ki + {z}]
  local b, now, a, q, card, dirty = sl_load(h, z, x$)
  if apply then
    local at = (ss$ - b) * E9 + sn$
    local found, seq = nil, -1
    if card > 0 then
      local es = redis.call('ZRANGEBYSCORE', z, dec(at), dec(at))
      for i = 1, #es do
        local s = mseq(es[i])
        if s > seq then found, seq = es[i], s end
      end
    end
    local room, d = max(0, am$ - a), d$
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
    sl_save(h, z, x$, b, now, a, q, card)
  elseif dirty then
    if card == 0 then
      redis.call('DEL', h, z)
    else
      redis.call('HSET', h, 'b', dec(b), 'a', dec(a), 'q', dec(q))
    end
  end
  r$ = max(0, am$ - a)
end
`,
	},
	limits.Concurrency: {
		nkeys:       1,
		acquireArgs: "sh$, n$, am$, x$", // amount, max hold
		// One hash per partition: a field h holding five float64s b (base
		// second), a (cost in flight), q (lease counter), e (earliest lease
		// expiry, a lower bound; -1 for none) and m (latest expiry), and a
		// field "l" .. <id as a float64> = <expiry, cost as two float64s>
		// per lease; expiries are nanoseconds from b. a is 0 exactly when
		// no lease is held, as every lease holds a positive cost. Leases
		// are scanned only when one may have expired. A new partition
		// numbers its leases from the current microsecond, so that a lease
		// id is never reused after the partition was dropped (a stale
		// ticket can never release someone else's lease).
		take: `
local b$, a$, q$, e$, m$
do
  local h = redis.call('HGET', KEYS[{k}], 'h')
  if h then
    b$, a$, q$, e$, m$ = up('<ddddd', h)
    if e$ < 0 then e$ = nil end
  else
    b$, a$, q$, m$ = now_s, 0, now_s * 1000000 + floor(now_n / 1000), 0
  end
end
local now$ = (now_s - b$) * E9 + now_n
local exp$, hd$ = 0, false
if a$ > 0 and (e$ == nil or e$ <= now$ or now$ > 4503599627370496) then
  b$, now$, m$, e$, a$, exp$ = lease_scan(KEYS[{k}], now_s, now_n, b$, now$, m$, a$)
  hd$ = true
end
if a$ <= 0 then a$, e$ = 0, nil end
local a0$, q0$, ok$, add$ = a$, q$, 0, 0
if a$ + n$ <= am$ then
  if n$ > 0 then q$, add$, a$ = q$ + 1, n$, a$ + n$ end
  ok$ = 1
end
`,
		// The lease when the batch fits, or else what reclaiming expired
		// leases changed.
		save: `
if fits and add$ > 0 then
  local exp, e, m = now$ + x$, e$, m$
  if exp > m then m = exp end
  if e == nil or exp < e then e = exp end
  redis.call('HSET', KEYS[{k}], pk('<c1d', 'l', q$), pk('<dd', exp, add$), 'h', pk('<ddddd', b$, a$, q$, e, m))
  local ms = ceil((m - now$) / 1000000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[{k}], fmt('%d', ms + grace))
elseif hd$ then
  if a0$ == 0 then
    redis.call('DEL', KEYS[{k}])
  else
    redis.call('HSET', KEYS[{k}], 'h', pk('<ddddd', b$, a0$, q0$, e$ or -1, m$))
  end
end
`,
		reply: []string{"ok$", "a$", "(add$ > 0 and q$ or 0)", "exp$"},
		// The cost of the leases not expired, counted as lease_scan
		// counts them, none reclaimed.
		peek: `
local ok$, a$, add$, q$, exp$ = 1, 0, 0, 0, 0
do
  local h = redis.call('HGET', KEYS[{k}], 'h')
  if h then
    local b, a, q, e, m = up('<ddddd', h)
    local now, shift = (now_s - b) * E9 + now_n, 0
    if a > 0 and (e < 0 or e <= now or now > 4503599627370496) then
      if now > 4503599627370496 then shift, now = (now_s - b) * E9, now_n end
      a = 0
      local all = redis.call('HGETALL', KEYS[{k}])
      for i = 1, #all, 2 do
        if string.byte(all[i], 1) == 108 then
          local exp, cost = up('<dd', all[i + 1])
          if exp - shift > now then a = a + cost end
        end
      end
    end
    if a > 0 then a$ = a end
  end
end
if a$ > am$ then ok$ = 0 end
`,
		settleArgs: "l$, tk$, am$, x$", // lease, taken, amount, max hold
		// The lease, if still held, is dropped (see leaseRead).
		settle: `
local r$ = 0
do
  local b, a, q, e, m = 0, 0, 0, -1, 0
  if h$[1] then b, a, q, e, m = up('<ddddd', h$[1]) end
  if h$[2] then
    a = a - tk$
    if a <= 0 then
      a = 0
      redis.call('DEL', KEYS[ki + {k}])
    else
      redis.call('HDEL', KEYS[ki + {k}], f$)
      redis.call('HSET', KEYS[ki + {k}], 'h', pk('<ddddd', b, a, q, e, m))
    end
  end
  if am$ > a then r$ = am$ - a end
end
`,
	},
	limits.Quota: {
		nkeys: 1, get: true,
		// amount, the period's start, its length and 1 for a calendar
		// period (day, month), whose start the caller computes in its
		// Location and the script only checks.
		acquireArgs: "sh$, n$, am$, hs$, hn$, x$, cal$",
		skew:        "quota_skew(hs$, hn$, x$, cal$)",
		take:        "local ws$, wn$, el$ = quota_place(hs$, hn$, x$, cal$)\n" + countTake,
		save:        countSave,
		reply:       []string{"ok$", "am$ - min(a$, am$)", "rs$", "rt$", "ws$", "wn$"},
		settleArgs:  "d$, ss$, sn$, am$, hs$, hn$, x$, cal$",
		settle:      "local r$ = 0\ndo\n  local ws, wn, el = quota_place(hs$, hn$, x$, cal$)\n" + countAdjust + "end\n",
	},
}

// fwPlace places a fixed window's op: its window (ws$, wn$), el$ into it,
// and the key of its count, k$ (the one given, named after the caller's
// window, when the server's time is in it; no function is called then).
const fwPlace = `
local ws$, wn$, el$, k$ = hs$, hn$, (now_s - hs$) * E9 + (now_n - hn$), KEYS[{k}]
if el$ < 0 or el$ >= x$ then
  ws$, wn$, el$ = window(x$, hs$, hn$)
  k$ = wkey(k$, ws$, wn$)
end`

// fwTake takes n$ from a fixed window's count: an INCRBY of the window's
// key (k$: the key given, named after the caller's window, when the
// server's time is in it, as it nearly always is), its expiry set when
// the count is new (at the window's end, plus the grace), so that a key
// never lives without one whatever the rest of the script does; a take
// of zero permits, or of more than the limit (which never fits), only
// reads the count. When the take does not fit, or the batch does not,
// the save gives the increment back (c$ > 0 says there is one). With rf$
// (the caller found the partition full at its last take in this window:
// see fullWindows) the count is read first and incremented only when the
// take fits, so that a flood of refused takes writes nothing.
const fwTake = fwPlace + `
local a$, ok$, c$ = 0, 0, 0
if rf$ == 1 or n$ <= 0 or n$ > am$ then a$ = tonumber(redis.call('GET', k$)) or 0 end
if n$ > 0 and n$ <= am$ and (rf$ == 0 or a$ + n$ <= am$) then
  c$ = redis.call('INCRBY', k$, fmt('%d', n$))
  if c$ == n$ then redis.call('PEXPIRE', k$, ttl(x$ - el$)) end
  a$ = c$ - n$
end
if a$ + n$ <= am$ then a$, ok$ = a$ + n$, 1 end
`

// A quota's take, save and adjustment: a count a$ in the period (ws$,
// wn$) of length x$, el$ into it.
const (
	countTake = `
local a$, ok$, rt$ = 0, 0, 0
if v$ then
  local a, ss, sn = up('<ddd', v$)
  if ss == ws$ and sn == wn$ then a$ = a end
end
local rs$ = x$ - el$
if a$ + n$ <= am$ then
  a$, ok$ = a$ + n$, 1
elseif n$ > am$ then
  rt$ = NEVER
else
  rt$ = rs$
end
`
	countSave = `
if fits and ok$ == 1 then
  if a$ > 0 then
    redis.call('SET', KEYS[{k}], pk('<ddd', a$, ws$, wn$), 'PX', ttl(x$ - el$))
  else
    redis.call('DEL', KEYS[{k}])
  end
end
`
	// countAdjust applies d$ to the count when it is the ticket's window
	// (a charge applies to the current window in any case); ws, wn and el
	// place the current window.
	countAdjust = `
  local a = 0
  local v = redis.call('GET', KEYS[ki + {k}])
  if v then
    local c, s, n = up('<ddd', v)
    if s == ws and n == wn then a = c end
  end
  if apply and ((ss$ == ws and sn$ == wn) or d$ > 0) then
    a = bounded(a, d$, am$)
    if a > 0 then
      redis.call('SET', KEYS[ki + {k}], pk('<ddd', a, ws, wn), 'PX', ttl(x$ - el))
    else
      redis.call('DEL', KEYS[ki + {k}])
    end
  end
  r$ = max(0, am$ - a)
`
)

// helperOrder is the order helpers are defined in (later ones use
// earlier ones), and helperNames what each defines, when it defines
// more than its own name: a script defines only the functions it calls,
// a definition costing a closure per call.
var (
	helperOrder = []string{"never", "ceil_ns", "dec", "ttl", "window", "far", "quota_place", "quota_skew", "bounded", "wkey", "log", "lease"}
	helperNames = map[string][]string{
		"never": {"NEVER"},
		"log":   {"mcost(", "mseq(", "sl_load(", "sl_last(", "sl_save("},
		"lease": {"lease_scan("},
	}
)

// leaseRead reads, before the settle decides whether it applies, a
// concurrency partition's sums and lease l$.
const leaseRead = `
local f$ = pk('<c1d', 'l', l$)
local h$ = redis.call('HMGET', KEYS[ki + {k}], 'h', f$)
`

// settleOnce decides whether the settle applies (see above); lease op $ is
// the first released.
const settleOnce = `
if idem > 0 then
  local el = (now_s - t0s) * E9 + (now_n - t0n)
  if mark > 0 and el < x$ - idem * 1000000 then
    -- The lease outlives any retry: held means not applied yet.
    apply = h$[2] ~= false
  elseif ki == 0 then
    return 'K'
  elseif not redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) then
    apply = false
  elseif mark > 0 and not h$[2] and el < x$ then
    -- Released, not expired: by an attempt that took the branch above.
    apply = false
  end
end
`

const settleOnceKeyOnly = `
if idem > 0 then
  if ki == 0 then return 'K' end
  apply = redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) ~= false
end
`

// A settle's parts delete a key at once; in a settle of several ops,
// delLater makes them delete it with the others at the end, in one DEL
// (a partition's key, or a fixed window's count, wk).
var delLater = strings.NewReplacer(
	"redis.call('DEL', KEYS[ki + {k}])", "nd = nd + 1; dels[nd] = KEYS[ki + {k}]",
	"redis.call('DEL', wk)", "nd = nd + 1; dels[nd] = wk",
)

// An opLayout places one op of a script: its number, its first key's
// index and its algorithm.
type opLayout struct {
	num, key int
	alg      *algLua
}

// layout places the ops of algs.
func layout(algs []limits.Algorithm) []opLayout {
	ops := make([]opLayout, len(algs))
	key := 1
	for i, a := range algs {
		ops[i] = opLayout{num: i + 1, key: key, alg: &luaAlg[a]}
		key += luaAlg[a].nkeys
	}
	return ops
}

// part instantiates src for op o.
func (o opLayout) part(src string) string {
	return strings.NewReplacer("$", strconv.Itoa(o.num), "{k}", strconv.Itoa(o.key), "{z}", strconv.Itoa(o.key+1)).Replace(src)
}

// args returns the Lua names of ops' arguments (acquire or settle) and
// the struct format of the header and them.
func args(header string, ops []opLayout, settle bool) (names, format string) {
	var list []string
	if header != "" {
		list = append(list, header)
	}
	for _, o := range ops {
		if settle {
			list = append(list, o.part(o.alg.settleArgs))
		} else {
			list = append(list, o.part(o.alg.acquireArgs))
		}
	}
	names = strings.Join(list, ", ")
	return names, "<" + strings.Repeat("d", strings.Count(names, ",")+1)
}

// width returns the number of float64 arguments of ops.
func width(ops []opLayout, settle bool) int {
	if len(ops) == 0 {
		return 0
	}
	_, format := args("", ops, settle)
	return len(format) - 1
}

// withHelpers returns the script of body (after the prelude and the
// arguments) with the helpers it uses defined before it: a script defines
// only the functions it calls (a definition costs a closure per call).
func withHelpers(head, body string) string {
	var used []string
	text := body
	for i := len(helperOrder) - 1; i >= 0; i-- {
		h := helperOrder[i]
		names, ok := helperNames[h]
		if !ok {
			names = []string{h + "("}
		}
		for _, name := range names {
			if strings.Contains(text, name) {
				used = append([]string{luaHelpers[h]}, used...)
				text += luaHelpers[h]
				break
			}
		}
	}
	return head + strings.Join(used, "") + body
}

// unpack writes the reading of ops' arguments, which start after skip
// float64s of ARGV[1].
func unpack(b *strings.Builder, ops []opLayout, skip int, settle bool) {
	names, format := args("", ops, settle)
	fmt.Fprintf(b, "local %s = up('%s', ARGV[1], %d)\n", names, format, 8*skip+1)
}

// skews writes the window checks of ops: ret is the statement returning
// the server's time. With unpacked false, each reads its op's arguments
// (at skip float64s, then on).
func skews(b *strings.Builder, ops []opLayout, ret string, unpacked bool, skip int, settle bool) {
	for i, o := range ops {
		if o.alg.skew == "" {
			continue
		}
		if unpacked {
			fmt.Fprintf(b, "if %s then %s end\n", o.part(o.alg.skew), ret)
			continue
		}
		b.WriteString("do\n")
		unpack(b, ops[i:i+1], skip+width(ops[:i], settle), settle)
		fmt.Fprintf(b, "if %s then %s end\nend\n", o.part(o.alg.skew), ret)
	}
}

const skewReply = "return 'S' .. pk('<dd', now_s, now_n)"

// genAcquire returns the acquire script of the ops of algs.
func genAcquire(algs []limits.Algorithm) string {
	ops := layout(algs)
	var head, b strings.Builder
	head.WriteString(prelude)
	if len(ops) <= chunkMax {
		names, format := args("clock, now_s, now_n, grace", ops, false)
		fmt.Fprintf(&head, "local %s = up('%s', ARGV[1])\n", names, format)
		head.WriteString(luaTime)
		skews(&b, ops, skewReply, true, 0, false)
		reply := acquireChunk(&b, ops, "", true)
		fmt.Fprintf(&b, "return pk('<dd%s', now_s, now_n, %s)\n", strings.Repeat("d", len(reply)), strings.Join(reply, ", "))
		return withHelpers(head.String(), b.String())
	}
	head.WriteString("local clock, now_s, now_n, grace = up('<dddd', ARGV[1])\n")
	head.WriteString(luaTime)
	skews(&b, ops, skewReply, false, 4, false)
	// The chunks, the last first: each calls the next.
	n := (len(ops) + chunkMax - 1) / chunkMax
	for c := n - 1; c >= 0; c-- {
		chunk := ops[c*chunkMax : min(len(ops), (c+1)*chunkMax)]
		fmt.Fprintf(&b, "local function take%d(fits)\n", c)
		unpack(&b, chunk, 4+width(ops[:c*chunkMax], false), false)
		next := ""
		if c+1 < n {
			next = fmt.Sprintf("take%d", c+1)
		}
		reply := acquireChunk(&b, chunk, next, false)
		rest := ""
		if next != "" {
			rest = " .. rest"
		}
		fmt.Fprintf(&b, "return fits, pk('<%s', %s)%s\nend\n", strings.Repeat("d", len(reply)), strings.Join(reply, ", "), rest)
	}
	b.WriteString("local _, r = take0(true)\nreturn pk('<dd', now_s, now_n) .. r\n")
	return withHelpers(head.String(), b.String())
}

// genPeek returns the read-only script of one op of algs[0] (a peek is
// one op): the acquire's header, window check and reads, then the op's
// take for zero permits (or its peek, for an algorithm whose take
// writes), and the acquire's reply; no save. Its arguments are an
// acquire's, for zero permits.
func genPeek(algs []limits.Algorithm) string {
	ops := layout(algs[:1])
	o := ops[0]
	var head, b strings.Builder
	head.WriteString(prelude)
	names, format := args("clock, now_s, now_n, grace", ops, false)
	fmt.Fprintf(&head, "local %s = up('%s', ARGV[1])\n", names, format)
	head.WriteString(luaTime)
	skews(&b, ops, skewReply, true, 0, false)
	if o.alg.get {
		fmt.Fprintf(&b, "local v%d = redis.call('GET', KEYS[%d])\n", o.num, o.key)
	}
	src := o.alg.peek
	if src == "" {
		src = o.alg.take
	}
	b.WriteString(o.part(src))
	reply := make([]string, len(o.alg.reply))
	for i, r := range o.alg.reply {
		reply[i] = o.part(r)
	}
	fmt.Fprintf(&b, "return pk('<dd%s', now_s, now_n, %s)\n", strings.Repeat("d", len(reply)), strings.Join(reply, ", "))
	return withHelpers(head.String(), b.String())
}

// acquireChunk writes the reads, takes and saves of ops, the whole batch's
// fitting computed here when top, or passed to the chunk and on to next
// (if any: it returns whether the batch fits and its reply, rest). It
// returns the Lua expressions of ops' reply.
func acquireChunk(b *strings.Builder, ops []opLayout, next string, top bool) []string {
	var gets []opLayout
	for _, o := range ops {
		if o.alg.get {
			gets = append(gets, o)
		}
	}
	switch len(gets) {
	case 0:
	case 1:
		fmt.Fprintf(b, "local v%d = redis.call('GET', KEYS[%d])\n", gets[0].num, gets[0].key)
	default:
		var keys []string
		for _, o := range gets {
			keys = append(keys, "KEYS["+strconv.Itoa(o.key)+"]")
		}
		fmt.Fprintf(b, "local vs = redis.call('MGET', %s)\n", strings.Join(keys, ", "))
		for j, o := range gets {
			fmt.Fprintf(b, "local v%d = vs[%d]\n", o.num, j+1)
		}
	}
	var fits, reply []string
	for _, o := range ops {
		b.WriteString(o.part(o.alg.take))
		fits = append(fits, o.part("(ok$ == 1 or sh$ == 1)"))
		for _, r := range o.alg.reply {
			reply = append(reply, o.part(r))
		}
	}
	if top {
		fmt.Fprintf(b, "local fits = %s\n", strings.Join(fits, " and "))
	} else {
		fmt.Fprintf(b, "fits = fits and %s\n", strings.Join(fits, " and "))
	}
	if next != "" {
		fmt.Fprintf(b, "local rest\nfits, rest = %s(fits)\n", next)
	}
	for _, o := range ops {
		b.WriteString(o.part(o.alg.save))
	}
	return reply
}

// genSettle returns the settle script of the ops of algs: adjustments,
// and releases for concurrency limits.
func genSettle(algs []limits.Algorithm) string {
	ops := layout(algs)
	const header = "clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki"
	var head, b strings.Builder
	head.WriteString(prelude)
	single := len(ops) <= chunkMax
	if single {
		names, format := args(header, ops, true)
		fmt.Fprintf(&head, "local %s = up('%s', ARGV[1])\n", names, format)
	} else {
		fmt.Fprintf(&head, "local %s = up('<ddddddddd', ARGV[1])\n", header)
	}
	head.WriteString(luaTime)
	skews(&b, ops, skewReply, single, 9, true)
	b.WriteString("local apply = true\n")
	first, adjusts := -1, false
	for i, o := range ops {
		if o.alg == &luaAlg[limits.Concurrency] {
			if first < 0 {
				first = i
			}
		} else {
			adjusts = true
		}
	}
	// The keys a settle of several ops empties (a bucket refilled to
	// full, a partition's last lease released) go in one DEL at the end:
	// one command where each would be one.
	del := func(src string) string { return src }
	if len(ops) > 1 {
		b.WriteString("local dels, nd = {}, 0\n")
		del = delLater.Replace
	}
	if single {
		for _, o := range ops {
			if o.alg == &luaAlg[limits.Concurrency] {
				b.WriteString(o.part(leaseRead))
			}
		}
		switch {
		case !adjusts:
		case first >= 0:
			b.WriteString(ops[first].part(settleOnce))
		default:
			b.WriteString(settleOnceKeyOnly)
		}
		var reply []string
		for _, o := range ops {
			b.WriteString(o.part(del(o.alg.settle)))
			reply = append(reply, o.part("r$"))
		}
		b.WriteString("local r = pk('<" + strings.Repeat("d", len(reply)) + "', " + strings.Join(reply, ", ") + ")\n")
	} else {
		if adjusts {
			b.WriteString(settleOnceKeyOnly)
		}
		b.WriteString("local r = ''\n")
		for c := 0; c*chunkMax < len(ops); c++ {
			chunk := ops[c*chunkMax : min(len(ops), (c+1)*chunkMax)]
			fmt.Fprintf(&b, "local function settle%d()\n", c)
			unpack(&b, chunk, 9+width(ops[:c*chunkMax], true), true)
			var reply []string
			for _, o := range chunk {
				if o.alg == &luaAlg[limits.Concurrency] {
					b.WriteString(o.part(leaseRead))
				}
				b.WriteString(o.part(del(o.alg.settle)))
				reply = append(reply, o.part("r$"))
			}
			fmt.Fprintf(&b, "return pk('<%s', %s)\nend\nr = r .. settle%d()\n", strings.Repeat("d", len(reply)), strings.Join(reply, ", "), c)
		}
	}
	if len(ops) > 1 {
		b.WriteString("if nd > 0 then redis.call('DEL', unpack(dels, 1, nd)) end\n")
	}
	b.WriteString("return r\n")
	return withHelpers(head.String(), b.String())
}
