package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// renewScript extends a concurrency lease in place: it reclaims the
// partition's expired leases when one may have expired (the lease to renew
// among them: an expired lease is never taken again), then moves the
// lease's expiry to now + max hold, and the partition's latest expiry and
// its key's with it. The earliest expiry stays a lower bound. ARGV[1]:
// clock, now_s, now_n, grace, the lease id and the max hold; KEYS[1]: the
// partition. The reply: 1 if the lease was held, the cost in flight, the
// leases reclaimed.
var renewScript = newScript(prelude + luaLeaseScan + `
local clock, now_s, now_n, grace, id, hold = up('<dddddd', ARGV[1])
` + luaTime + `
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

var _ backend.Peeker = (*limiter)(nil)

// Peek implements backend.Peeker: one call of the algorithm's read-only
// script (see genPeek), which reads the partition's keys and the server's
// TIME and writes nothing, an absent key reading as a new partition. Its
// latency is not reported to the store's observer, whose operations are
// those of decisions.
func (l *limiter) Peek(ctx context.Context, key string, lim *limits.Limit, now time.Time, g *backend.Grant) error {
	s := l.s
	if s.brk.refusing() {
		return s.openErr
	}
	ops := [1]backend.Op{{Limiter: l, Key: key, Limit: *lim, Shadow: true}}
	sc := peekScripts.get([]byte{byte(l.alg)})
	reply, err := retry(nowNanos(now), true, func(now int64, _ bool) (string, error) {
		return s.run(ctx, sc, opPeek, 1, s.acquireCall(ops[:], now))
	})
	if err == nil {
		_, err = fillGrants(ops[:], reply, false)
	}
	r := &ops[0].Grant
	*g = backend.Grant{Limit: r.Limit, Remaining: r.Remaining, Reset: r.Reset, Stamp: r.Stamp}
	return err
}

// A script is a Lua script the store runs by its hash (see Store.eval).
type script struct {
	src, sha any // the source and its hex SHA-1, boxed once for the calls
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// A scriptCache holds the generated script of each sequence of
// algorithms, created on first use. Its key is the sequence, one byte per
// op (its limits.Algorithm); the map is replaced, never changed, so that
// a lookup takes no lock.
type scriptCache struct {
	gen     func([]limits.Algorithm) string
	mu      sync.Mutex
	scripts atomic.Pointer[map[string]*script]
}

func (c *scriptCache) get(key []byte) *script {
	if m := c.scripts.Load(); m != nil {
		if s, ok := (*m)[string(key)]; ok {
			return s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.scripts.Load()
	if old != nil {
		if s, ok := (*old)[string(key)]; ok {
			return s
		}
	}
	algs := make([]limits.Algorithm, len(key))
	for i, a := range key {
		algs[i] = limits.Algorithm(a)
	}
	s := newScript(c.gen(algs))
	m := make(map[string]*script, 1)
	if old != nil {
		m = maps.Clone(*old)
	}
	m[string(key)] = s
	c.scripts.Store(&m)
	return s
}

var (
	acquireScripts = &scriptCache{gen: genAcquire}
	settleScripts  = &scriptCache{gen: genSettle}
	peekScripts    = &scriptCache{gen: genPeek}
)

// blob is the binary argument of a script. Passed as a pointer to the
// client, which asks for its bytes (encoding.BinaryMarshaler), it costs
// no allocation.
type blob struct{ b []byte }

// MarshalBinary implements encoding.BinaryMarshaler.
func (b *blob) MarshalBinary() ([]byte, error) { return b.b, nil }

func (b *blob) int(vs ...int64) {
	for _, v := range vs {
		b.b = binary.LittleEndian.AppendUint64(b.b, math.Float64bits(float64(v)))
	}
}

// blobHeader starts b with the clock, the instant and the grace.
func (s *Store) blobHeader(b *blob, now int64, clock int) {
	b.b = b.b[:0]
	if s.cfg.CallerTime && clock == clockServer {
		clock = clockCaller
	}
	sec, ns := split(now)
	b.int(int64(clock), sec, ns, s.grace)
}

// floats reads a script's reply.
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

// scriptKey appends to dst the key of the scripts of ops (the settle's:
// only the ops with work, when settle).
func scriptKey(dst []byte, ops []backend.Op, settle bool) []byte {
	for i := range ops {
		l := ops[i].Limiter.(*limiter)
		if !settle || settles(l, &ops[i]) {
			dst = append(dst, byte(l.alg))
		}
	}
	return dst
}

// putKeys adds the Redis keys of partition key under lim to c, at now:
// one (for a fixed window, the count of the window holding now), or two
// for a sliding log.
func (l *limiter) putKeys(c *call, key string, lim *limits.Limit, now int64) {
	switch l.alg {
	case limits.FixedWindow:
		c.putKey(func(b []byte) []byte { return appendWindow(l.appendKey(b, key), floorTo(now, int64(lim.Per))) })
	case limits.SlidingLog:
		c.putKey(func(b []byte) []byte { return l.appendSubKey(b, "h:", key) })
		c.putKey(func(b []byte) []byte { return l.appendSubKey(b, "z:", key) })
	default:
		c.putKey(func(b []byte) []byte { return l.appendKey(b, key) })
	}
}

// appendWindow appends to dst the suffix of a fixed window's count key
// after its partition's key: '@' and the window's start, in Unix seconds,
// then a dot and nine digits of nanoseconds when they are not zero (the
// scripts' wkey).
func appendWindow(dst []byte, start int64) []byte {
	sec, ns := split(start)
	dst = append(dst, '@')
	dst = strconv.AppendInt(dst, sec, 10)
	if ns == 0 {
		return dst
	}
	dst = append(dst, ".000000000"...)
	for i := len(dst) - 1; ns > 0; i-- {
		dst[i] = byte('0' + ns%10)
		ns /= 10
	}
	return dst
}

// acquireCall returns the keys and argument of the acquire of ops.
func (s *Store) acquireCall(ops []backend.Op, now int64) *call {
	c := s.getCall()
	s.blobHeader(&c.blob, now, clockServer)
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		l.putKeys(c, op.Key, &op.Limit, now)
		var shadow int64
		if op.Shadow {
			shadow = 1
		}
		lim := &op.Limit
		switch l.alg {
		case limits.TokenBucket:
			c.blob.int(shadow, op.N, lim.Amount, lim.Capacity(), int64(lim.Per))
		case limits.Concurrency:
			c.blob.int(shadow, op.N, lim.Amount, maxHold(lim))
		case limits.SlidingLog:
			c.blob.int(shadow, op.N, lim.Amount, int64(lim.Per))
		case limits.FixedWindow:
			start := floorTo(now, int64(lim.Per))
			ws, wn := split(start)
			var readFirst int64
			if l.full.has(l.full.fingerprint(op.Key, start)) {
				readFirst = 1
			}
			c.blob.int(shadow, op.N, lim.Amount, int64(lim.Per), ws, wn, readFirst)
		case limits.SlidingWindow:
			ws, wn := split(floorTo(now, int64(lim.Per)))
			c.blob.int(shadow, op.N, lim.Amount, int64(lim.Per), ws, wn)
		default:
			ps, pn, length, cal := quotaPeriod(lim, now)
			c.blob.int(shadow, op.N, lim.Amount, ps, pn, length, cal)
		}
	}
	c.flushKeys()
	c.args = append(c.args, &c.blob)
	return c
}

// grants fills the grants of ops from an acquire's reply. When an
// enforcing op did not fit, the batch took nothing: every grant then holds
// nothing, and the Remaining of those that fit is the partition's without
// their permits, as the script left it (their Reset is the one of the
// take, as after a refund: see backend.Limiter.Adjust).
func grants(ops []backend.Op, reply string) error {
	fits, err := fillGrants(ops, reply, false)
	if err != nil || fits {
		return err
	}
	_, err = fillGrants(ops, reply, true)
	return err
}

// fillGrants reads an acquire's reply into the grants of ops, and reports
// whether the batch fits; with back, it gives every grant's permits back.
func fillGrants(ops []backend.Op, reply string, back bool) (bool, error) {
	r := floats{s: reply}
	now := r.int() * 1e9
	now += r.int()
	fits := true
	for i := range ops {
		op := &ops[i]
		g := &op.Grant
		*g = backend.Grant{OK: r.float() == 1}
		// taken is what the reply's figures count of op's permits.
		taken := int64(0)
		if back && g.OK {
			taken = op.N
		}
		switch op.Limiter.(*limiter).alg {
		case limits.TokenBucket:
			g.Limit = op.Limit.Capacity()
			g.Stamp = now
			backend.BucketFigures(&op.Limit, op.N, r.float(), g)
		case limits.Concurrency:
			g.Limit = op.Limit.Amount
			g.Remaining = g.Limit - min(max(r.int()-taken, 0), g.Limit)
			if !g.OK && op.N > g.Limit {
				g.RetryAfter = limits.Never
			}
			g.Stamp = r.int()
			g.Expired = int32(r.int())
		case limits.SlidingLog:
			g.Limit = op.Limit.Amount
			g.Remaining, g.Reset, g.RetryAfter = r.int(), dur(r.int()), dur(r.int())
			g.Stamp = now
		case limits.FixedWindow:
			// The count; the window is the one holding the server's
			// instant, as the script placed it.
			g.Limit = op.Limit.Amount
			g.Remaining = g.Limit - min(r.int(), g.Limit)
			per := int64(op.Limit.Per)
			g.Stamp = floorTo(now, per)
			g.Reset = time.Duration(g.Stamp + per - now)
			switch {
			case g.OK:
			case op.N > g.Limit:
				g.RetryAfter = limits.Never
			default:
				g.RetryAfter = g.Reset
			}
		default:
			g.Limit = op.Limit.Amount
			g.Remaining, g.Reset, g.RetryAfter = r.int(), dur(r.int()), dur(r.int())
			ws := r.int() * 1e9
			g.Stamp = ws + r.int()
		}
		if op.Limiter.(*limiter).alg != limits.Concurrency {
			g.Remaining = min(g.Remaining+taken, g.Limit)
		}
		if g.OK && !back {
			g.Taken = op.N
		} else if !g.OK && !op.Shadow {
			fits = false
		}
		if back && op.Limiter.(*limiter).alg == limits.Concurrency {
			g.Stamp = 0
		}
	}
	if r.err || len(r.s) != 0 {
		return false, fmt.Errorf("redisstore: malformed reply %q", reply)
	}
	return fits, nil
}

// maxHold returns the lease lifetime of a concurrency limit, in
// nanoseconds.
func maxHold(lim *limits.Limit) int64 {
	if lim.MaxHold <= 0 {
		return int64(limits.DefaultMaxHold)
	}
	return int64(lim.MaxHold)
}

// settleCall returns the keys and argument of the settle of the ops with
// work, at now, with the idempotency key of tag when keyed.
func (s *Store) settleCall(ops []backend.Op, now int64, clock int, tag string, keyed bool, idem, mark, t0 int64) *call {
	c := s.getCall()
	if keyed {
		c.putKey(func(b []byte) []byte { return s.appendSettleKey(b, tag) })
	}
	s.blobHeader(&c.blob, now, clock)
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
		l.putKeys(c, op.Key, &op.Limit, now)
		lim := &op.Limit
		ss, sn := split(op.Grant.Stamp)
		switch l.alg {
		case limits.TokenBucket:
			c.blob.int(op.N, lim.Amount, lim.Capacity(), int64(lim.Per))
		case limits.Concurrency:
			c.blob.int(op.Grant.Stamp, op.Grant.Taken, lim.Amount, maxHold(lim))
		case limits.SlidingLog:
			c.blob.int(op.N, ss, sn, lim.Amount, int64(lim.Per))
		case limits.FixedWindow, limits.SlidingWindow:
			ws, wn := split(floorTo(now, int64(lim.Per)))
			c.blob.int(op.N, ss, sn, lim.Amount, int64(lim.Per), ws, wn)
		default:
			ps, pn, length, cal := quotaPeriod(lim, now)
			c.blob.int(op.N, ss, sn, lim.Amount, ps, pn, length, cal)
		}
	}
	c.flushKeys()
	c.args = append(c.args, &c.blob)
	return c
}

// settled records a settle's reply, or its error, in ops.
func settled(ops []backend.Op, reply string, err error) error {
	r := floats{s: reply}
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if !settles(l, op) {
			continue
		}
		if err != nil {
			op.Err = err
			continue
		}
		rem := r.int()
		if l.alg != limits.Concurrency {
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
