package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
)

// The lean scripts evaluate the most common multi-policy request, token
// buckets (requests, tokens) and concurrency leases, straight through: no
// per-algorithm function tables, no per-op tables, no number parsing or
// formatting for their arguments and replies. They compute the same
// figures and write the same state as ALG[0] and ALG[4] under the generic
// driver (the conformance and differential tests run them through the
// single-policy concurrency calls and every batch of these two
// algorithms).
//
// Their arguments are one binary string, ARGV[1], of little-endian
// float64s (every figure they use is an integer below 2^53, or a quotient
// they compute as the generic scripts do), and so are their replies.
//
// Acquire: clock (0 for Redis TIME, 1 for the caller's instant), now_s,
// now_n, grace_ms, count, then five per op: kind (0 token bucket, 2
// concurrency; plus 1 in shadow mode), n, amount, then capacity and per for
// a token bucket, max hold and 0 for a concurrency limit. KEYS: one per op.
// The reply is now_s, now_n, then per op ok, remaining, reset, retry for a
// token bucket and ok, remaining, retry, lease, expired for a concurrency
// limit; the caller derives taken, limit and the stamps (see leanAcquire).
//
// Settle: clock (2 when no token bucket is adjusted: a release does not
// need the time), now_s, now_n, grace_ms, count, idem_ms, mark, t0_s,
// t0_n, then five per op: 0, delta, amount, capacity, per to adjust a token
// bucket; 2, lease, taken, amount, max hold to release a lease. KEYS: the
// idempotency key when idem_ms is positive, then one per op. The reply is
// the remaining figure of each op.
//
// A settle that adjusts a bucket must apply once even when the client
// sends it again after losing the reply. The idempotency key records that
// it was applied, except when it also releases a lease that cannot have
// expired by the time a retry runs: the lease's absence then says the same
// thing at no cost. mark is the (1-based) op holding that lease and t0 the
// instant the batch was admitted (the token buckets' stamp): a lease
// admitted at t0 lives until t0 + max hold, and retries run within idem_ms
// of each other (as the idempotency key's own expiry assumes). A settle
// already applied writes nothing and reports the current figures.
const luaLeanAcquire = `
local up, pk = struct.unpack, struct.pack
local min, ceil, floor, fmt = math.min, math.ceil, math.floor, string.format
local E9, MAXD = 1000000000, 4611686018427387903
local P = ARGV[1]
local clock, now_s, now_n, grace, count = up('<ddddd', P)
if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
local out = {pk('<dd', now_s, now_n)}
-- st keeps 16 slots per op for the commit: kind, ok, a, a0, then the
-- algorithm's.
local st = {}
local fits = true
local pos = 41
for i = 1, count do
  local kind, n, amount, p4, p5
  kind, n, amount, p4, p5, pos = up('<ddddd', P, pos)
  local k = KEYS[i]
  local j = (i - 1) * 16 + 1
  local ok = 0
  if kind < 2 then
    local cap, per = p4, p5
    local a, ts, tn
    local v = redis.call('GET', k)
    if v then a, ts, tn = up('<ddd', v) else a, ts, tn = cap, now_s, now_n end
    local el = (now_s - ts) * E9 + (now_n - tn)
    if el > 0 then
      a = min(cap, a + el * (amount / per))
      ts, tn = now_s, now_n
    end
    local a0, retry = a, 0
    if n <= a then
      a = a - n
      ok = 1
    elseif n > cap then
      retry = -1
    else
      retry = min(ceil((n - a) / (amount / per)), MAXD)
    end
    local rem, reset = 0, 0
    if a > 0 then rem = floor(a) end
    local miss = (cap - a) * (per / amount)
    if miss > 0 then reset = min(ceil(miss), MAXD) end
    out[i + 1] = pk('<dddd', ok, rem, reset, retry)
    st[j], st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7] =
      kind, ok, a, a0, ts, tn, cap, per / amount
  else
    local hv = redis.call('HGET', k, 'h')
    local b, a, q, e, m
    if hv then
      b, a, q, e, m = up('<ddddd', hv)
      if e < 0 then e = nil end
    else
      b, a, q, m = now_s, 0, now_s * 1000000 + floor(now_n / 1000), 0
    end
    local now = (now_s - b) * E9 + now_n
    local expired, hdirty = 0, false
    if a > 0 and (e == nil or e <= now or now > 4503599627370496) then
      local shift = 0
      if now > 4503599627370496 then
        shift = (now_s - b) * E9
        b, now, m = now_s, now_n, m - shift
      end
      local all = redis.call('HGETALL', k)
      local dels = {}
      e = nil
      for x = 1, #all, 2 do
        local f = all[x]
        if string.byte(f, 1) == 108 then
          local exp, cost = up('<dd', all[x + 1])
          exp = exp - shift
          if exp <= now then
            dels[#dels + 1] = f
            a = a - cost
            expired = expired + 1
          else
            if shift ~= 0 then redis.call('HSET', k, f, pk('<dd', exp, cost)) end
            if e == nil or exp < e then e = exp end
          end
        end
      end
      for x = 1, #dels, 500 do
        redis.call('HDEL', k, unpack(dels, x, min(x + 499, #dels)))
      end
      if e == nil then a = 0 end
      hdirty = true
    end
    if a <= 0 then a, e = 0, nil end
    local a0, q0 = a, q
    local retry, add = 0, 0
    if a + n <= amount then
      if n > 0 then
        q = q + 1
        add = n
        a = a + n
      end
      ok = 1
    elseif n > amount then
      retry = -1
    end
    local lease = 0
    if add > 0 then lease = q end
    out[i + 1] = pk('<ddddd', ok, amount - min(a, amount), retry, lease, expired)
    st[j], st[j + 1], st[j + 2], st[j + 3], st[j + 4], st[j + 5], st[j + 6], st[j + 7] =
      kind, ok, a, a0, q, q0, b, now
    st[j + 8], st[j + 9], st[j + 10], st[j + 11], st[j + 12] = e, m, add, p4, hdirty
  end
  if ok == 0 and kind % 2 == 0 then fits = false end
end
for i = 1, count do
  local k = KEYS[i]
  local j = (i - 1) * 16 + 1
  if st[j] < 2 then
    local a = st[j + 3]
    if fits and st[j + 1] == 1 then a = st[j + 2] end
    local cap = st[j + 6]
    if a >= cap then
      redis.call('DEL', k)
    else
      local ms = ceil((cap - a) * st[j + 7] / 1000000)
      if ms < 1 then ms = 1 end
      redis.call('SET', k, pk('<ddd', a, st[j + 4], st[j + 5]), 'PX', fmt('%d', ms + grace))
    end
  elseif fits and st[j + 10] > 0 then
    local now, q = st[j + 7], st[j + 4]
    local exp = now + st[j + 11]
    local e, m = st[j + 8], st[j + 9]
    if exp > m then m = exp end
    if e == nil or exp < e then e = exp end
    redis.call('HSET', k, 'l' .. pk('<d', q), pk('<dd', exp, st[j + 10]),
      'h', pk('<ddddd', st[j + 6], st[j + 2], q, e, m))
    local ms = ceil((m - now) / 1000000)
    if ms < 1 then ms = 1 end
    redis.call('PEXPIRE', k, fmt('%d', ms + grace))
  elseif st[j + 12] then
    if st[j + 3] == 0 then
      redis.call('DEL', k)
    else
      redis.call('HSET', k, 'h', pk('<ddddd', st[j + 6], st[j + 3], st[j + 5], st[j + 8], st[j + 9]))
    end
  end
end
return table.concat(out)
`

// luaLeanSettle adjusts token buckets and releases concurrency leases (see
// luaLeanAcquire for its arguments).
const luaLeanSettle = `
local up, pk = struct.unpack, struct.pack
local min, floor, fmt = math.min, math.floor, string.format
local P = ARGV[1]
local clock, now_s, now_n, grace, count, idem, mark, t0s, t0n = up('<ddddddddd', P)
if clock == 0 then
  local t = redis.call('TIME')
  now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
end
local ki, apply, mh = 0, true, nil
if idem > 0 then
  ki = 1
  local el, hold = 0, 0
  if mark > 0 then
    local _, lease, _, _, h = up('<ddddd', P, 73 + (mark - 1) * 40)
    hold = h
    mh = redis.call('HMGET', KEYS[1 + mark], 'h', 'l' .. pk('<d', lease))
    el = (now_s - t0s) * 1000000000 + (now_n - t0n)
  end
  if mark > 0 and el < hold - idem * 1000000 then
    -- The lease outlives any retry: held means not applied yet.
    apply = mh[2] ~= false
  elseif not redis.call('SET', KEYS[1], '1', 'NX', 'PX', idem) then
    apply = false
  elseif mark > 0 and not mh[2] and el < hold then
    -- Released, not expired: by an attempt that took the branch above.
    apply = false
  end
end
local out = {}
local pos = 73
for i = 1, count do
  local kind, v1, v2, v3, v4
  kind, v1, v2, v3, v4, pos = up('<ddddd', P, pos)
  local k = KEYS[ki + i]
  if kind == 0 then
    local amount, cap, per = v2, v3, v4
    local a, ts, tn
    local v = redis.call('GET', k)
    if v then a, ts, tn = up('<ddd', v) else a, ts, tn = cap, now_s, now_n end
    local el = (now_s - ts) * 1000000000 + (now_n - tn)
    if el > 0 then
      a = min(cap, a + el * (amount / per))
      ts, tn = now_s, now_n
    end
    if apply then
      a = min(a - v1, cap)
      if a >= cap then
        redis.call('DEL', k)
      else
        local ms = math.ceil((cap - a) * (per / amount) / 1000000)
        if ms < 1 then ms = 1 end
        redis.call('SET', k, pk('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
      end
    end
    local rem = 0
    if a > 0 then rem = floor(a) end
    out[i] = pk('<d', rem)
  else
    local f = 'l' .. pk('<d', v1)
    local h = mh
    if i ~= mark then h = redis.call('HMGET', k, 'h', f) end
    local b, a, q, e, m = 0, 0, 0, -1, 0
    if h[1] then b, a, q, e, m = up('<ddddd', h[1]) end
    if h[2] then
      a = a - v2
      if a <= 0 then
        a = 0
        redis.call('DEL', k)
      else
        redis.call('HDEL', k, f)
        redis.call('HSET', k, 'h', pk('<ddddd', b, a, q, e, m))
      end
    end
    out[i] = pk('<d', math.max(0, v3 - a))
  end
end
return table.concat(out)
`

var (
	leanAcquireScript = redis.NewScript(luaLeanAcquire)
	leanSettleScript  = redis.NewScript(luaLeanSettle)
)

// leanHeader is the size of the settle's header, before its ops.
const (
	leanOpSize        = 5 * 8
	leanSettleHeader  = 9 * 8
	leanKindBucket    = 0
	leanKindLease     = 2
	leanClockServer   = 0
	leanClockCaller   = 1
	leanClockUnneeded = 2
)

// lean reports whether every op is a token bucket or a concurrency limit,
// the algorithms of the lean acquire script.
func lean(ops []admission.Op) bool {
	for i := range ops {
		switch ops[i].Limiter.(*limiter).alg {
		case admission.TokenBucket, admission.Concurrency:
		default:
			return false
		}
	}
	return true
}

// leanSettle reports whether every op with work is a token bucket
// adjustment or a concurrency release, the work of the lean settle script.
func leanSettle(ops []admission.Op) bool {
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if !settles(l, op) {
			continue
		}
		switch {
		case l.alg == admission.TokenBucket && !op.Release:
		case l.alg == admission.Concurrency && op.Release:
		default:
			return false
		}
	}
	return true
}

// blob is the binary argument of a lean script. Passed as a pointer to
// the client, which asks for its bytes (encoding.BinaryMarshaler), it
// costs no allocation.
type blob struct{ b []byte }

// MarshalBinary implements encoding.BinaryMarshaler.
func (b *blob) MarshalBinary() ([]byte, error) { return b.b, nil }

func (b *blob) put(v float64) { b.b = binary.LittleEndian.AppendUint64(b.b, math.Float64bits(v)) }

func (b *blob) int(v int64) { b.put(float64(v)) }

// header appends the clock, the instant and the grace.
func (s *Store) leanHeader(b *blob, now int64, clock int) {
	b.b = b.b[:0]
	if s.cfg.CallerTime && clock == leanClockServer {
		clock = leanClockCaller
	}
	sec, ns := split(now)
	b.int(int64(clock))
	b.int(sec)
	b.int(ns)
	b.int(s.grace)
}

// floats reads a lean script's reply.
type floats struct {
	s   string
	err bool
}

func (r *floats) int() int64 {
	if len(r.s) < 8 {
		r.err = true
		return 0
	}
	s := r.s
	v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	r.s = s[8:]
	return int64(math.Float64frombits(v))
}

// leanAcquire runs the lean acquire script over ops (see lean) and fills
// their grants as the generic script would.
func (s *Store) leanAcquire(ctx context.Context, name string, ops []admission.Op, now int64) error {
	c := s.getCall()
	s.leanHeader(&c.blob, now, leanClockServer)
	c.blob.int(int64(len(ops)))
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		c.keys = l.appendKeys(c.keys, op.Key)
		kind := leanKindBucket
		if l.alg == admission.Concurrency {
			kind = leanKindLease
		}
		if op.Shadow {
			kind++
		}
		c.blob.int(int64(kind))
		c.blob.int(op.N)
		c.blob.int(op.Limit.Amount)
		if l.alg == admission.TokenBucket {
			c.blob.int(op.Limit.Capacity())
			c.blob.int(int64(op.Limit.Per))
		} else {
			c.blob.int(maxHold(&op.Limit))
			c.blob.int(0)
		}
	}
	c.args = append(c.args, &c.blob)
	reply, err := s.run(ctx, "", leanAcquireScript, name, len(ops), c.keys, c.args)
	s.putCall(c)
	if err != nil {
		return err
	}
	r := floats{s: reply}
	ss, sn := r.int(), r.int()
	fits := true
	for i := range ops {
		op := &ops[i]
		g := &op.Grant
		*g = admission.Grant{OK: r.int() == 1, Remaining: r.int()}
		if op.Limiter.(*limiter).alg == admission.TokenBucket {
			g.Limit = op.Limit.Capacity()
			g.Reset = dur(r.int())
			g.RetryAfter = dur(r.int())
			g.Stamp = ss*1e9 + sn
		} else {
			g.Limit = op.Limit.Amount
			g.RetryAfter = dur(r.int())
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
			if ops[i].Limiter.(*limiter).alg == admission.Concurrency {
				g.Stamp = 0
			}
		}
	}
	return nil
}

// maxHold returns the lease lifetime of a concurrency limit, in
// nanoseconds.
func maxHold(lim *admission.Limit) int64 {
	if lim.MaxHold <= 0 {
		return int64(admission.DefaultMaxHold)
	}
	return int64(lim.MaxHold)
}

// leanSettleOps runs the lean settle script over the ops of a settle that
// have work (see leanSettle).
func (s *Store) leanSettleOps(ctx context.Context, ops []admission.Op, now int64) error {
	count, mark := 0, 0
	var t0 int64
	var tag string
	for i := range ops {
		op := &ops[i]
		if !settles(op.Limiter.(*limiter), op) {
			continue
		}
		count++
		switch {
		case !op.Release:
			if tag == "" {
				tag, t0 = Tag(op.Key), op.Grant.Stamp
			}
		case mark == 0:
			mark = count
		}
	}
	if count == 0 {
		return nil
	}
	c := s.getCall()
	clock, idem := leanClockServer, int64(0)
	if tag == "" {
		// Releases only: no time, nothing to apply twice.
		clock, mark = leanClockUnneeded, 0
	} else {
		idem = s.idemMS
		c.keys = append(c.keys, s.settleKey(tag))
		if t0 == 0 {
			mark = 0
		}
	}
	s.leanHeader(&c.blob, now, clock)
	t0s, t0n := split(t0)
	for _, v := range [...]int64{int64(count), idem, int64(mark), t0s, t0n} {
		c.blob.int(v)
	}
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if !settles(l, op) {
			continue
		}
		c.keys = l.appendKeys(c.keys, op.Key)
		if op.Release {
			for _, v := range [...]int64{leanKindLease, op.Grant.Stamp, op.Grant.Taken, op.Limit.Amount, maxHold(&op.Limit)} {
				c.blob.int(v)
			}
			continue
		}
		for _, v := range [...]int64{leanKindBucket, op.N, op.Limit.Amount, op.Limit.Capacity(), int64(op.Limit.Per)} {
			c.blob.int(v)
		}
	}
	c.args = append(c.args, &c.blob)
	reply, err := s.run(ctx, "", leanSettleScript, "settle", count, c.keys, c.args)
	s.putCall(c)
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
