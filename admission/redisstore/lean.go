package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
)

// The lean scripts evaluate the most common multi-policy request, token
// buckets (requests, tokens) and concurrency leases, straight through:
// no per-algorithm function tables, no per-op closures, a short reply. They
// compute the same figures and write the same state as ALG[0] and ALG[4]
// under the generic driver (the conformance and differential tests run
// them through the single-policy concurrency calls and every batch of
// these two algorithms), and run with EVALSHA, which on Redis 7 costs less
// server time than FCALL of the generic library function.
//
// ARGV starts as the generic acquire's and settle's (now_s, now_n,
// grace_ms, count, and idem_ms for a settle), KEYS are the same (one key
// per op, after the idempotency key of a settle), and each op passes only
// what its algorithm uses:
//
//	acquire, token bucket:  0, shadow, n, amount, capacity, per
//	acquire, concurrency:   4, shadow, n, amount, max_hold
//	settle, token bucket:   0, delta, amount, capacity, per
//	settle, concurrency:    4, lease, taken, amount
//
// The acquire reply is "now_s now_n" then per op "ok rem reset retry" for
// a token bucket and "ok rem retry lease expired" for a concurrency limit;
// the caller derives taken, limit and the stamps (see leanAcquire). The
// settle reply is the generic one.
const luaLeanAcquire = luaNow + `
local E9 = 1000000000
local MAXD = 4611686018427387903
local grace = tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local fmt = string.format
local ops, out = {}, {fmt('%d %d', now_s, now_n)}
local fits = true
local j = 4
for i = 1, count do
  local k = KEYS[i]
  local n = tonumber(ARGV[j + 3])
  local shadow = ARGV[j + 2] == '1'
  local o
  if ARGV[j + 1] == '0' then
    local amount, cap, per = tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6])
    j = j + 6
    local a, ts, tn
    local v = redis.call('GET', k)
    if v then a, ts, tn = struct.unpack('<ddd', v) else a, ts, tn = cap, now_s, now_n end
    local el = (now_s - ts) * E9 + (now_n - tn)
    if el > 0 then
      a = math.min(cap, a + el * (amount / per))
      ts, tn = now_s, now_n
    end
    local a0 = a
    local ok, retry = 0, 0
    if n <= a then
      a = a - n
      ok = 1
    elseif n > cap then
      retry = -1
    else
      retry = math.min(math.ceil((n - a) / (amount / per)), MAXD)
    end
    local rem = 0
    if a > 0 then rem = math.floor(a) end
    local miss = (cap - a) * (per / amount)
    local reset = 0
    if miss > 0 then reset = math.min(math.ceil(miss), MAXD) end
    out[i + 1] = fmt('%d %d %d %d', ok, rem, reset, retry)
    o = {tb = true, ok = ok, a = a, a0 = a0, ts = ts, tn = tn, cap = cap, amount = amount, per = per}
  else
    local amount, hold = tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
    j = j + 5
    local h = redis.call('HMGET', k, 'b', 'a', 'q', 'e', 'm')
    local a = tonumber(h[2]) or 0
    local q = tonumber(h[3]) or (now_s * 1000000 + math.floor(now_n / 1000))
    local b = tonumber(h[1]) or now_s
    local now = (now_s - b) * E9 + now_n
    local e = tonumber(h[4])
    local m = tonumber(h[5]) or 0
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
          local xs, c = string.match(all[x + 1], '^(-?%d+):(%d+)$')
          local exp, cost = tonumber(xs) - shift, tonumber(c)
          if exp <= now then
            dels[#dels + 1] = f
            a = a - cost
            expired = expired + 1
          else
            if shift ~= 0 then redis.call('HSET', k, f, fmt('%d', exp) .. ':' .. c) end
            if e == nil or exp < e then e = exp end
          end
        end
      end
      for x = 1, #dels, 500 do
        redis.call('HDEL', k, unpack(dels, x, math.min(x + 499, #dels)))
      end
      if e == nil then a = 0 end
      hdirty = true
    end
    if a <= 0 then a, e = 0, nil end
    local a0, q0 = a, q
    local ok, retry, add = 0, 0, 0
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
    out[i + 1] = fmt('%d %d %d %d %d', ok, amount - math.min(a, amount), retry, lease, expired)
    o = {ok = ok, a = a, a0 = a0, q = q, q0 = q0, b = b, now = now, e = e, m = m, add = add, hold = hold, hdirty = hdirty}
  end
  if o.ok == 0 and not shadow then fits = false end
  o.k = k
  ops[i] = o
end
for i = 1, count do
  local o = ops[i]
  local k = o.k
  if o.tb then
    local a = o.a0
    if fits and o.ok == 1 then a = o.a end
    if a >= o.cap then
      redis.call('DEL', k)
    else
      local ms = math.ceil((o.cap - a) * (o.per / o.amount) / 1000000)
      if ms < 1 then ms = 1 end
      redis.call('SET', k, struct.pack('<ddd', a, o.ts, o.tn), 'PX', fmt('%d', ms + grace))
    end
  elseif fits and o.add > 0 then
    local exp = o.now + o.hold
    local m, e = o.m, o.e
    if exp > m then m = exp end
    if e == nil or exp < e then e = exp end
    redis.call('HSET', k, 'l' .. fmt('%d', o.q), fmt('%d', exp) .. ':' .. fmt('%d', o.add),
      'b', fmt('%d', o.b), 'a', fmt('%d', o.a), 'q', fmt('%d', o.q), 'e', fmt('%d', e), 'm', fmt('%d', m))
    local ms = math.ceil((m - o.now) / 1000000)
    if ms < 1 then ms = 1 end
    redis.call('PEXPIRE', k, fmt('%d', ms + grace))
  elseif o.hdirty then
    if o.a0 == 0 then
      redis.call('DEL', k)
    else
      redis.call('HSET', k, 'b', fmt('%d', o.b), 'a', fmt('%d', o.a0), 'q', fmt('%d', o.q0), 'e', fmt('%d', o.e), 'm', fmt('%d', o.m))
    end
  end
end
return table.concat(out, ' ')
`

// luaLeanSettle adjusts token buckets and releases concurrency leases.
// A release does not need the server's time, so a settle of releases only
// does not read TIME.
const luaLeanSettle = `
local idem = tonumber(ARGV[5])
local ki = 1
if idem > 0 then
  if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[5]) then return 'D' end
  ki = 2
end
local now_s, now_n
local grace = tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local fmt = string.format
local out = {}
local j = 5
for i = 1, count do
  local k = KEYS[ki + i - 1]
  if ARGV[j + 1] == '0' then
    if not now_s then
      if ARGV[1] == '' then
        local t = redis.call('TIME')
        now_s, now_n = tonumber(t[1]), tonumber(t[2]) * 1000
      else
        now_s, now_n = tonumber(ARGV[1]), tonumber(ARGV[2])
      end
    end
    local d = tonumber(ARGV[j + 2])
    local amount, cap, per = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
    j = j + 5
    local a, ts, tn
    local v = redis.call('GET', k)
    if v then a, ts, tn = struct.unpack('<ddd', v) else a, ts, tn = cap, now_s, now_n end
    local el = (now_s - ts) * 1000000000 + (now_n - tn)
    if el > 0 then
      a = math.min(cap, a + el * (amount / per))
      ts, tn = now_s, now_n
    end
    a = math.min(a - d, cap)
    if a >= cap then
      redis.call('DEL', k)
    else
      local ms = math.ceil((cap - a) * (per / amount) / 1000000)
      if ms < 1 then ms = 1 end
      redis.call('SET', k, struct.pack('<ddd', a, ts, tn), 'PX', fmt('%d', ms + grace))
    end
    if a > 0 then out[i] = fmt('%d', math.floor(a)) else out[i] = '0' end
  else
    local taken = tonumber(ARGV[j + 3])
    local f = 'l' .. ARGV[j + 2]
    local amount = tonumber(ARGV[j + 4])
    j = j + 4
    local h = redis.call('HMGET', k, 'a', f)
    local a = tonumber(h[1]) or 0
    if h[2] then
      a = a - taken
      if a <= 0 then
        a = 0
        redis.call('DEL', k)
      else
        redis.call('HDEL', k, f)
        redis.call('HSET', k, 'a', fmt('%d', a))
      end
    end
    out[i] = fmt('%d', math.max(0, amount - a))
  end
end
return table.concat(out, ' ')
`

var (
	leanAcquireScript = redis.NewScript(luaLeanAcquire)
	leanSettleScript  = redis.NewScript(luaLeanSettle)
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

// leanAcquire runs the lean acquire script over ops (see lean) and fills
// their grants as the generic script would.
func (s *Store) leanAcquire(ctx context.Context, name string, ops []admission.Op, now int64) error {
	c := s.getCall()
	s.header(c, now, len(ops))
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		c.keys = l.appendKeys(c.keys, op.Key)
		shadow := 0
		if op.Shadow {
			shadow = 1
		}
		c.args = append(c.args, int(l.alg), shadow, op.N)
		c.args = appendLeanParams(c.args, l, op.Limit, now)
	}
	reply, err := s.run(ctx, "", leanAcquireScript, name, len(ops), c.keys, c.args)
	s.putCall(c)
	if err != nil {
		return err
	}
	r := reader{s: reply}
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

// appendLeanParams appends the parameters of l that the lean scripts use:
// amount, capacity and per for a token bucket, amount and max hold for a
// concurrency limit.
func appendLeanParams(dst []any, l *limiter, lim admission.Limit, now int64) []any {
	n := len(dst)
	dst = l.params(dst, lim, now)
	if l.alg == admission.TokenBucket {
		return dst[:n+3]
	}
	return dst[:n+2]
}

// appendLeanSettle appends op's arguments for the lean settle
// script: an adjustment of a token bucket or the release of a lease.
func appendLeanSettle(c *call, op *admission.Op, now int64) {
	l := op.Limiter.(*limiter)
	if op.Release {
		c.args = append(c.args, int(l.alg), op.Grant.Stamp, op.Grant.Taken)
		n := len(c.args)
		c.args = appendLeanParams(c.args, l, op.Limit, now)[:n+1] // amount
		return
	}
	c.args = append(c.args, int(l.alg), op.N)
	c.args = appendLeanParams(c.args, l, op.Limit, now)
}
