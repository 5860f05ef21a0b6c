package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// The lean scripts evaluate the most common requests, token buckets
// (requests, tokens) and concurrency leases, alone or together, with
// straight-line code written for the request's exact sequence of
// algorithms: no loops, no per-op tables, no function tables, one read of
// all arguments and one reply. They compute the same figures and write the
// same state as ALG[0] and ALG[4] under the generic driver (the
// differential tests compare both with the in-memory limiter). A sequence
// of more than leanMax ops uses the generic scripts.
//
// Their arguments are one binary string, ARGV[1], of little-endian
// float64s (every figure they use is an integer below 2^53, or a quotient
// they compute as the generic scripts do), and so are their replies: no
// number is parsed or formatted on either side.
//
// Acquire: clock (0 for Redis TIME, 1 for the caller's instant), now_s,
// now_n, grace_ms, then five per op: shadow (0 or 1), n, amount, then
// capacity and per for a token bucket, max hold and 0 for a concurrency
// limit. KEYS: one per op. The reply is now_s, now_n, then per op ok and
// the permits left for a token bucket, ok, the cost in flight, the lease
// and the leases reclaimed for a concurrency limit; the caller derives the
// other figures (see leanAcquire).
//
// Settle: clock (2 when no token bucket is adjusted: a release does not
// need the time), now_s, now_n, grace_ms, idem_ms, mark, t0_s, t0_n, keyed,
// then five per op: delta, amount, capacity, per, 0 to adjust a token
// bucket; lease, taken, amount, max hold, 0 to release a lease. KEYS: the
// idempotency key when keyed is 1, then one per op. The reply is the
// remaining figure of each op, or "K" when the settle needs an
// idempotency key it was not given.
//
// A settle that adjusts a bucket must apply once even when the client
// sends it again after losing the reply. The idempotency key records that
// it was applied, except when it also releases a lease that cannot have
// expired by the time a retry runs: the lease's absence then says the same
// thing at no cost, and the caller sends no key. mark is 1 when t0 is the
// instant the batch was admitted (the token buckets' stamp), which the
// settle's first lease was taken at: that lease lives until t0 + max hold,
// and retries run within idem_ms of each other (as the idempotency key's
// own expiry assumes). A settle already applied writes nothing and reports
// the current figures.

// leanMax is the most ops a lean script takes: each op holds up to 20 Lua
// locals, of the 200 a function may have.
const leanMax = 8

const (
	leanClockServer   = 0
	leanClockCaller   = 1
	leanClockUnneeded = 2
)

// leanPrelude starts every lean script. (Redis before 5 replicates a
// script's effects only when asked: the scripts read TIME, then write.)
const leanPrelude = `
if redis.replicate_commands then redis.replicate_commands() end
local up, pk, fmt, ceil, floor = struct.unpack, struct.pack, string.format, math.ceil, math.floor
local E9 = 1000000000
local MAXTTL = 1125899906842624 -- ms, as in the generic scripts
`

const leanTime = `
if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
`

// The per-op parts of the scripts: $ stands for the op's number, # for its
// key's index. Op $'s arguments are sh$ (or the settle's d$/l$), n$ (tk$),
// am$, x$ and y$.

// bucketTake refills a token bucket read into v$ and takes n$ from it. The
// reply carries what is left, a$: the caller derives the figures
// (backend.BucketFigures).
const bucketTake = `
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
if a$ < -x$ then a$ = -x$ end
local a0$, ok$ = a$, 0
if n$ <= a$ then a$, ok$ = a$ - n$, 1 end
`

// bucketSave writes a token bucket back: what it took when the batch fits,
// its refill otherwise; a full bucket is deleted. Only taking permits
// moves the instant a bucket is full again later: a refill keeps the key's
// expiry, set when permits were last taken (the same holds for a refund).
const bucketSave = `
if fits and ok$ == 1 and n$ > 0 then
  local ms = ceil((x$ - a$) * (y$ / am$) / 1000000)
  if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
  redis.call('SET', KEYS[#], pk('<ddd', a$, ts$, tn$), 'PX', fmt('%d', ms + grace))
elseif a0$ >= x$ then
  if v$ then redis.call('DEL', KEYS[#]) end
else
  redis.call('SET', KEYS[#], pk('<ddd', a0$, ts$, tn$), 'KEEPTTL')
end
`

// leaseTake loads a concurrency partition, reclaims its expired leases
// when one may have expired, and takes n$ (a lease numbered q$ + 1).
const leaseTake = `
local b$, a$, q$, e$, m$
do
  local h = redis.call('HGET', KEYS[#], 'h')
  if h then
    b$, a$, q$, e$, m$ = up('<ddddd', h)
    if e$ < 0 then e$ = nil end
  else
    -- A new partition numbers its leases from the current microsecond.
    b$, a$, q$, m$ = now_s, 0, now_s * 1000000 + floor(now_n / 1000), 0
  end
end
local now$ = (now_s - b$) * E9 + now_n
local exp$, hd$ = 0, false
if a$ > 0 and (e$ == nil or e$ <= now$ or now$ > 4503599627370496) then
  b$, now$, m$, e$, a$, exp$ = lease_scan(KEYS[#], now_s, now_n, b$, now$, m$, a$)
  hd$ = true
end
if a$ <= 0 then a$, e$ = 0, nil end
local a0$, q0$, ok$, add$ = a$, q$, 0, 0
if a$ + n$ <= am$ then
  if n$ > 0 then q$, add$, a$ = q$ + 1, n$, a$ + n$ end
  ok$ = 1
end
`

// leaseSave records the lease when the batch fits, or else writes back
// what reclaiming expired leases changed.
const leaseSave = `
if fits and add$ > 0 then
  local exp, e, m = now$ + x$, e$, m$
  if exp > m then m = exp end
  if e == nil or exp < e then e = exp end
  redis.call('HSET', KEYS[#], pk('<c1d', 'l', q$), pk('<dd', exp, add$), 'h', pk('<ddddd', b$, a$, q$, e, m))
  local ms = ceil((m - now$) / 1000000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[#], fmt('%d', ms + grace))
elseif hd$ then
  if a0$ == 0 then
    redis.call('DEL', KEYS[#])
  else
    redis.call('HSET', KEYS[#], 'h', pk('<ddddd', b$, a0$, q0$, e$, m$))
  end
end
`

// bucketAdjust refills a token bucket and, when the settle applies, adds
// -d$ to it.
const bucketAdjust = `
local r$ = 0
do
  local a, ts, tn = x$, now_s, now_n
  local v = redis.call('GET', KEYS[ki + #])
  if v then a, ts, tn = up('<ddd', v) end
  local el = (now_s - ts) * E9 + (now_n - tn)
  if el > 0 then
    local f = a + el * (am$ / y$)
    if f < x$ then a = f else a = x$ end
    ts, tn = now_s, now_n
  end
  if a < -x$ then a = -x$ end
  if apply then
    a = a - d$
    if a < -x$ then a = -x$ end
    if a >= x$ then
      a = x$
      redis.call('DEL', KEYS[ki + #])
    elseif d$ < 0 then
      redis.call('SET', KEYS[ki + #], pk('<ddd', a, ts, tn), 'KEEPTTL')
    else
      local ms = ceil((x$ - a) * (y$ / am$) / 1000000)
      if ms < 1 then ms = 1 elseif ms > MAXTTL then ms = MAXTTL end
      redis.call('SET', KEYS[ki + #], pk('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
    end
  end
  if a > 0 then r$ = floor(a) end
end
`

// leaseRead reads a concurrency partition's sums and lease l$.
const leaseRead = `
local f$ = pk('<c1d', 'l', l$)
local h$ = redis.call('HMGET', KEYS[ki + #], 'h', f$)
`

// leaseRelease drops lease l$ if it is still held.
const leaseRelease = `
local r$ = 0
do
  local b, a, q, e, m = 0, 0, 0, -1, 0
  if h$[1] then b, a, q, e, m = up('<ddddd', h$[1]) end
  if h$[2] then
    a = a - tk$
    if a <= 0 then
      a = 0
      redis.call('DEL', KEYS[ki + #])
    else
      redis.call('HDEL', KEYS[ki + #], f$)
      redis.call('HSET', KEYS[ki + #], 'h', pk('<ddddd', b, a, q, e, m))
    end
  end
  if am$ > a then r$ = am$ - a end
end
`

// renewScript extends a concurrency lease in place: it reclaims the
// partition's expired leases when one may have expired (the lease to renew
// among them: an expired lease is never taken again), then moves the
// lease's expiry to now + max hold, and the partition's latest expiry and
// its key's with it. The earliest expiry stays a lower bound. ARGV[1]:
// clock, now_s, now_n, grace, the lease id and the max hold; KEYS[1]: the
// partition. The reply: 1 if the lease was held, the cost in flight, the
// leases reclaimed.
var renewScript = newScript(leanPrelude + luaLeaseScan + `
local clock, now_s, now_n, grace, id, hold = up('<dddddd', ARGV[1])
` + leanTime + `
local h = redis.call('HGET', KEYS[1], 'h')
if not h then return pk('<ddd', 0, 0, 0) end
local b, a, q, e, m = up('<ddddd', h)
if e < 0 then e = nil end
local now, expired, dirty = (now_s - b) * E9 + now_n, 0, false
if a > 0 and (e == nil or e <= now or now > 4503599627370496) then
  b, now, m, e, a, expired = lease_scan(KEYS[1], now_s, now_n, b, now, m, a)
  dirty = true
end
local f = pk('<c1d', 'l', id)
local v = a > 0 and redis.call('HGET', KEYS[1], f)
local held = 0
if v then
  held = 1
  local exp, cost = up('<dd', v)
  local nexp = now + hold
  if nexp > exp then
    redis.call('HSET', KEYS[1], f, pk('<dd', nexp, cost))
    if nexp > m then m = nexp end
    dirty = true
  end
end
if a <= 0 then
  if dirty then redis.call('DEL', KEYS[1]) end
  a = 0
elseif dirty then
  if e == nil then e = -1 end
  redis.call('HSET', KEYS[1], 'h', pk('<ddddd', b, a, q, e, m))
  local ms = ceil((m - now) / 1000000)
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', KEYS[1], fmt('%d', ms + grace))
end
return pk('<ddd', held, a, expired)
`)

// Renew implements backend.Renewer: one script call for a concurrency
// grant that holds a lease, none otherwise. The lease runs for its max
// hold from the Redis server's time.
func (l *limiter) Renew(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	if l.alg != limits.Concurrency || g.Stamp == 0 {
		return nil
	}
	reply, err := l.s.run(ctx, renewScript, "renew", 1, l.renewCall(key, lim, g, now))
	if err != nil {
		return err
	}
	return l.renewed(lim, g, reply)
}

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
  apply = redis.call('SET', KEYS[1], '1', 'NX', 'PX', fmt('%d', idem)) ~= false
end
`

// A shape is the algorithm sequence of a lean call, one bit per op (set
// for a concurrency limit) above a leading 1 that marks the count.
type shape uint16

func (sh shape) push(lease bool) shape {
	if lease {
		return sh<<1 | 1
	}
	return sh << 1
}

// ops returns whether each op of sh is a concurrency limit, in order.
func (sh shape) ops() []bool {
	var leases []bool
	for b := sh; b > 1; b >>= 1 {
		leases = append(leases, b&1 == 1)
	}
	for i, j := 0, len(leases)-1; i < j; i, j = i+1, j-1 {
		leases[i], leases[j] = leases[j], leases[i]
	}
	return leases
}

// A script is a Lua script the store runs by its hash (see Store.eval).
type script struct {
	src, sha any // the source and its hex SHA-1, boxed once for the calls
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// scriptCache holds the generated script of each shape (lean) or set of
// algorithms (generic), created on first use.
type scriptCache[K shape | algSet] struct {
	scripts [2 << leanMax]atomic.Pointer[script]
	gen     func(K) string
	mu      sync.Mutex
}

func (c *scriptCache[K]) get(k K) *script {
	if s := c.scripts[k].Load(); s != nil {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.scripts[k].Load(); s != nil {
		return s
	}
	s := newScript(c.gen(k))
	c.scripts[k].Store(s)
	return s
}

var (
	leanAcquires = &scriptCache[shape]{gen: genAcquire}
	leanSettles  = &scriptCache[shape]{gen: genSettle}
)

// argList returns the Lua names of the header and of each op's five
// arguments, and the struct format reading them.
func argList(header string, leases []bool, names func(lease bool) string) (string, string) {
	list := header
	for i, lease := range leases {
		list += ", " + strings.ReplaceAll(names(lease), "$", strconv.Itoa(i+1))
	}
	return list, "<" + strings.Repeat("d", strings.Count(list, ",")+1)
}

// part instantiates a per-op part for op i.
func part(src string, i int) string {
	n := strconv.Itoa(i + 1)
	return strings.NewReplacer("$", n, "#", n).Replace(src)
}

func genAcquire(sh shape) string {
	leases := sh.ops()
	list, format := argList("clock, now_s, now_n, grace", leases, func(bool) string { return "sh$, n$, am$, x$, y$" })
	var b strings.Builder
	b.WriteString(leanPrelude)
	fmt.Fprintf(&b, "local %s = up('%s', ARGV[1])\n", list, format)
	b.WriteString(leanTime)
	var buckets []string
	for i, lease := range leases {
		if !lease {
			buckets = append(buckets, strconv.Itoa(i+1))
		}
	}
	switch len(buckets) {
	case 0:
	case 1:
		fmt.Fprintf(&b, "local v%s = redis.call('GET', KEYS[%s])\n", buckets[0], buckets[0])
	default:
		fmt.Fprintf(&b, "local vs = redis.call('MGET', KEYS[%s])\n", strings.Join(buckets, "], KEYS["))
		for j, i := range buckets {
			fmt.Fprintf(&b, "local v%s = vs[%d]\n", i, j+1)
		}
	}
	if len(buckets) < len(leases) {
		b.WriteString(luaLeaseScan)
	}
	var fits, reply []string
	reply = append(reply, "now_s", "now_n")
	for i, lease := range leases {
		n := strconv.Itoa(i + 1)
		if lease {
			b.WriteString(part(leaseTake, i))
			reply = append(reply, "ok"+n, "a"+n, "(add"+n+" > 0 and q"+n+" or 0)", "exp"+n)
		} else {
			b.WriteString(part(bucketTake, i))
			reply = append(reply, "ok"+n, "a"+n)
		}
		fits = append(fits, "(ok"+n+" == 1 or sh"+n+" == 1)")
	}
	fmt.Fprintf(&b, "local fits = %s\n", strings.Join(fits, " and "))
	for i, lease := range leases {
		if lease {
			b.WriteString(part(leaseSave, i))
		} else {
			b.WriteString(part(bucketSave, i))
		}
	}
	fmt.Fprintf(&b, "return pk('<%s', %s)\n", strings.Repeat("d", len(reply)), strings.Join(reply, ", "))
	return b.String()
}

func genSettle(sh shape) string {
	leases := sh.ops()
	list, format := argList("clock, now_s, now_n, grace, idem, mark, t0s, t0n, ki", leases, func(lease bool) string {
		if lease {
			return "l$, tk$, am$, x$, z$"
		}
		return "d$, am$, x$, y$, z$"
	})
	var b strings.Builder
	b.WriteString(leanPrelude)
	fmt.Fprintf(&b, "local %s = up('%s', ARGV[1])\n", list, format)
	b.WriteString(leanTime)
	b.WriteString("local apply = true\n")
	first, adjusts := -1, false
	for i, lease := range leases {
		if lease {
			b.WriteString(part(leaseRead, i))
			if first < 0 {
				first = i
			}
		} else {
			adjusts = true
		}
	}
	switch {
	case !adjusts:
	case first >= 0:
		b.WriteString(part(settleOnce, first))
	default:
		b.WriteString(settleOnceKeyOnly)
	}
	// With more than one op, the keys a settle empties (a bucket refilled
	// to full, a partition's last lease released) go in one DEL at the
	// end: one command where each would be one.
	del := func(src string) string { return src }
	if len(leases) > 1 {
		b.WriteString("local dels, nd = {}, 0\n")
		del = func(src string) string { return strings.ReplaceAll(src, delOne, delLater) }
	}
	var reply []string
	for i, lease := range leases {
		if lease {
			b.WriteString(part(del(leaseRelease), i))
		} else {
			b.WriteString(part(del(bucketAdjust), i))
		}
		reply = append(reply, "r"+strconv.Itoa(i+1))
	}
	if len(leases) > 1 {
		b.WriteString("if nd > 0 then redis.call('DEL', unpack(dels, 1, nd)) end\n")
	}
	fmt.Fprintf(&b, "return pk('<%s', %s)\n", strings.Repeat("d", len(reply)), strings.Join(reply, ", "))
	return b.String()
}

// How bucketAdjust and leaseRelease delete their key: at once, or (in a
// settle of several ops) with the others at the end.
const (
	delOne   = "redis.call('DEL', KEYS[ki + #])"
	delLater = "nd = nd + 1; dels[nd] = KEYS[ki + #]"
)

// leanAcquireShape returns the shape of ops if the lean acquire scripts
// take them: at most leanMax token buckets and concurrency limits.
func leanAcquireShape(ops []backend.Op) (shape, bool) {
	if len(ops) > leanMax {
		return 0, false
	}
	sh := shape(1)
	for i := range ops {
		switch ops[i].Limiter.(*limiter).alg {
		case limits.TokenBucket:
			sh = sh.push(false)
		case limits.Concurrency:
			sh = sh.push(true)
		default:
			return 0, false
		}
	}
	return sh, true
}

// leanSettleShape returns the shape of the ops with work if the lean
// settle scripts take them: at most leanMax token bucket adjustments and
// concurrency releases.
func leanSettleShape(ops []backend.Op) (shape, bool) {
	sh, n := shape(1), 0
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if !settles(l, op) {
			continue
		}
		if n++; n > leanMax {
			return 0, false
		}
		switch {
		case l.alg == limits.TokenBucket && !op.Release:
			sh = sh.push(false)
		case l.alg == limits.Concurrency && op.Release:
			sh = sh.push(true)
		default:
			return 0, false
		}
	}
	return sh, true
}

// blob is the binary argument of a lean script. Passed as a pointer to
// the client, which asks for its bytes (encoding.BinaryMarshaler), it
// costs no allocation.
type blob struct{ b []byte }

// MarshalBinary implements encoding.BinaryMarshaler.
func (b *blob) MarshalBinary() ([]byte, error) { return b.b, nil }

func (b *blob) int(vs ...int64) {
	for _, v := range vs {
		b.b = binary.LittleEndian.AppendUint64(b.b, math.Float64bits(float64(v)))
	}
}

// leanHeader starts b with the clock, the instant and the grace.
func (s *Store) leanHeader(b *blob, now int64, clock int) {
	b.b = b.b[:0]
	if s.cfg.CallerTime && clock == leanClockServer {
		clock = leanClockCaller
	}
	sec, ns := split(now)
	b.int(int64(clock), sec, ns, s.grace)
}

// floats reads a lean script's reply.
type floats struct {
	s   string
	err bool
}

func (r *floats) float() float64 {
	if len(r.s) < 8 {
		r.err = true
		return 0
	}
	s := r.s
	v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	r.s = s[8:]
	return math.Float64frombits(v)
}

func (r *floats) int() int64 { return int64(r.float()) }

// leanAcquire runs the lean acquire script of shape sh over ops and fills
// their grants as the generic script would.
func (s *Store) leanAcquire(ctx context.Context, name string, sh shape, ops []backend.Op, now int64) error {
	reply, err := s.run(ctx, leanAcquires.get(sh), name, len(ops), s.leanAcquireCall(ops, now))
	if err != nil {
		return err
	}
	return leanGrants(ops, reply)
}

// leanAcquireCall returns the keys and argument of the lean acquire of ops.
func (s *Store) leanAcquireCall(ops []backend.Op, now int64) *call {
	c := s.getCall()
	s.leanHeader(&c.blob, now, leanClockServer)
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		c.putKey(func(b []byte) []byte { return l.appendKey(b, op.Key) })
		var shadow int64
		if op.Shadow {
			shadow = 1
		}
		if l.alg == limits.TokenBucket {
			c.blob.int(shadow, op.N, op.Limit.Amount, op.Limit.Capacity(), int64(op.Limit.Per))
		} else {
			c.blob.int(shadow, op.N, op.Limit.Amount, maxHold(&op.Limit), 0)
		}
	}
	c.flushKeys()
	c.args = append(c.args, &c.blob)
	return c
}

// leanGrants fills the grants of ops from a lean acquire's reply.
func leanGrants(ops []backend.Op, reply string) error {
	r := floats{s: reply}
	ss, sn := r.int(), r.int()
	fits := true
	for i := range ops {
		op := &ops[i]
		g := &op.Grant
		*g = backend.Grant{OK: r.float() == 1}
		left := r.float()
		if op.Limiter.(*limiter).alg == limits.TokenBucket {
			g.Limit = op.Limit.Capacity()
			g.Stamp = ss*1e9 + sn
			backend.BucketFigures(&op.Limit, op.N, left, g)
		} else {
			g.Limit = op.Limit.Amount
			g.Remaining = g.Limit - min(int64(left), g.Limit)
			if !g.OK && op.N > g.Limit {
				g.RetryAfter = limits.Never
			}
			g.Stamp = r.int()
			g.Expired = int32(r.int())
		}
		if g.OK {
			g.Taken = op.N
		} else if !op.Shadow {
			fits = false
		}
	}
	if r.err || len(r.s) != 0 {
		return fmt.Errorf("redisstore: malformed reply %q", reply)
	}
	if !fits {
		for i := range ops {
			g := &ops[i].Grant
			g.Taken = 0
			if ops[i].Limiter.(*limiter).alg == limits.Concurrency {
				g.Stamp = 0
			}
		}
	}
	return nil
}

// maxHold returns the lease lifetime of a concurrency limit, in
// nanoseconds.
func maxHold(lim *limits.Limit) int64 {
	if lim.MaxHold <= 0 {
		return int64(limits.DefaultMaxHold)
	}
	return int64(lim.MaxHold)
}

// leanSettleOps runs the lean settle script of shape sh over the ops of a
// settle that have work.
func (s *Store) leanSettleOps(ctx context.Context, sh shape, ops []backend.Op, now int64) error {
	count, hold := 0, int64(-1)
	var t0 int64
	var tag string
	for i := range ops {
		op := &ops[i]
		if !settles(op.Limiter.(*limiter), op) {
			continue
		}
		count++
		switch {
		case !op.Release && tag == "":
			tag, t0 = Tag(op.Key), op.Grant.Stamp
		case op.Release && hold < 0:
			hold = maxHold(&op.Limit)
		}
	}
	if count == 0 {
		return nil
	}
	clock, idem, mark, keyed := leanClockServer, int64(0), int64(0), false
	if tag == "" {
		// Releases only: no time, nothing to apply twice.
		clock = leanClockUnneeded
	} else {
		idem = s.idemMS
		if t0 != 0 && hold >= 0 {
			mark = 1
		}
		// Unless the lease marks the settle, the script needs an
		// idempotency key: send one when the lease may be near its expiry
		// by this replica's clock (if the server's says so when this one
		// did not, the script asks for a key and the call is made again).
		keyed = mark == 0 || now-t0 >= hold-2*idem*1e6
	}
	reply, err := retry(now, keyed, func(now int64, keyed bool) (string, error) {
		c := s.getCall()
		if keyed {
			c.putKey(func(b []byte) []byte { return s.appendSettleKey(b, tag) })
		}
		s.leanHeader(&c.blob, now, clock)
		t0s, t0n := split(t0)
		ki := int64(0)
		if keyed {
			ki = 1
		}
		c.blob.int(idem, mark, t0s, t0n, ki)
		for i := range ops {
			op := &ops[i]
			l := op.Limiter.(*limiter)
			if !settles(l, op) {
				continue
			}
			c.putKey(func(b []byte) []byte { return l.appendKey(b, op.Key) })
			if op.Release {
				c.blob.int(op.Grant.Stamp, op.Grant.Taken, op.Limit.Amount, maxHold(&op.Limit), 0)
			} else {
				c.blob.int(op.N, op.Limit.Amount, op.Limit.Capacity(), int64(op.Limit.Per), 0)
			}
		}
		c.flushKeys()
		c.args = append(c.args, &c.blob)
		return s.run(ctx, leanSettles.get(sh), "settle", count, c)
	})
	return settled(ops, reply, err)
}

// settled records a lean settle's reply, or its error, in ops.
func settled(ops []backend.Op, reply string, err error) error {
	r := floats{s: reply}
	for i := range ops {
		op := &ops[i]
		if !settles(op.Limiter.(*limiter), op) {
			continue
		}
		if err != nil {
			op.Err = err
			continue
		}
		rem := r.int()
		if !op.Release {
			op.Grant.Taken += op.N
			op.Grant.Remaining = rem
		}
	}
	if err != nil {
		return err
	}
	if r.err || len(r.s) != 0 {
		return fmt.Errorf("redisstore: malformed reply %q", reply)
	}
	return nil
}
