package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// Stats implements backend.Inspector. It writes nothing, in Redis or in
// the process's limiter state, so a scrape at any moment changes no
// decision.
//
// InFlight is the cost of the concurrency leases this replica holds,
// taken and neither released, nor found expired by a renewal, nor
// forgotten by the controller's lease keeper (a ticket dropped unsettled,
// a lease left unrenewed for its MaxHold: see backend.Forgetter),
// including those whose release failed and is being retried; it is read
// without a call. Other replicas report theirs: the fleet's in-flight work is the
// sum.
//
// Partitions and NearLimit are the policy's partitions in Redis, the
// whole fleet's (every replica reports the same figures): the keys of
// the policy (for a fixed window, the counts of the window holding the
// instant Stats is given) found by a read-only SCAN of its key pattern
// (on every master of a Cluster, every shard of a Ring), and those of
// them at 80% or more of the policy's own limit, as the in-memory store
// counts them (with the partition's figures as of now, reclaiming and
// refilling nothing). NearLimit counts token buckets, fixed windows and
// concurrency limits; the partitions of the other algorithms are counted
// in Partitions only. A count reads at most Config.StatsKeys keys, within
// the store's Timeout: when it stops there (a bound hit, a deadline
// passed, an error), Partitions and NearLimit are those of the keys read,
// a lower bound. A count is made at most once per Config.StatsEvery (by
// the instant Stats is given), never while the circuit breaker is open,
// and never on a request's path: in between, Stats reports the last one.
// Its calls bypass the breaker: a scrape's trouble does not decide
// requests.
func (l *limiter) Stats(lim *limits.Limit, now time.Time) backend.Stats {
	st := backend.Stats{InFlight: l.inFlight(now)}
	st.Partitions, st.NearLimit = l.partitions(lim, now)
	return st
}

// inFlight returns the cost of the leases this replica holds at now.
func (l *limiter) inFlight(now time.Time) int64 {
	n := l.held.Load()
	if l.nstuck.Load() > 0 {
		l.stuckMu.Lock()
		for _, sl := range l.stuck {
			if now.Before(sl.until) {
				n += sl.cost
			}
		}
		l.stuckMu.Unlock()
	}
	return n
}

var _ backend.Forgetter = (*limiter)(nil)

// Forget implements backend.Forgetter: the lease of g leaves this
// replica's in-flight figure (its release failed or not).
func (l *limiter) Forget(g *backend.Grant) {
	if l.alg != limits.Concurrency || g.Stamp == 0 {
		return
	}
	if l.nstuck.Load() == 0 || !l.unstick(g.Stamp) {
		l.held.Add(-g.Taken)
	}
}

// partScan is a limiter's last count of its partitions in Redis.
type partScan struct {
	mu          sync.Mutex
	at          time.Time // zero before the first count
	parts, near int
}

// partitions returns the policy's partitions and those near lim, counted
// at most once per StatsEvery.
func (l *limiter) partitions(lim *limits.Limit, now time.Time) (int, int) {
	sc := &l.scan
	sc.mu.Lock()
	defer sc.mu.Unlock()
	fresh := !sc.at.IsZero() && now.Sub(sc.at) < l.s.cfg.StatsEvery && !now.Before(sc.at)
	if fresh || l.s.brk.refusing() {
		return sc.parts, sc.near
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.s.cfg.Timeout)
	defer cancel()
	c := counter{l: l, lim: lim, now: now.UnixNano(), left: l.s.cfg.StatsKeys}
	_ = l.s.eachNode(ctx, c.node)
	sc.at, sc.parts, sc.near = now, c.parts, c.near
	return c.parts, c.near
}

// eachNode calls f with every node holding keys: the masters of a
// Cluster, the shards of a Ring, the client itself otherwise.
func (s *Store) eachNode(ctx context.Context, f func(context.Context, redis.Cmdable) error) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	}
	return f(ctx, s.client)
}

// counter counts a limiter's partitions, node by node (sequentially:
// ForEachMaster calls its function concurrently, hence the lock).
type counter struct {
	mu          sync.Mutex
	l           *limiter
	lim         *limits.Limit
	now         int64
	left        int // keys still to read
	parts, near int
}

// scanBatch is the COUNT of each SCAN call.
const scanBatch = 500

// node counts the partitions on one node.
func (c *counter) node(ctx context.Context, n redis.Cmdable) error {
	pattern := c.l.pattern(c.lim, c.now)
	var cursor uint64
	for {
		c.mu.Lock()
		left := c.left
		c.mu.Unlock()
		if left <= 0 {
			return nil
		}
		keys, next, err := n.Scan(ctx, cursor, pattern, scanBatch).Result()
		if err != nil {
			return err
		}
		if len(keys) > left {
			keys = keys[:left]
		}
		near, err := c.nearOf(ctx, n, keys)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.left -= len(keys)
		c.parts += len(keys)
		c.near += near
		c.mu.Unlock()
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// nearOf reads keys, in one pipeline, and returns how many are near the
// limit.
func (c *counter) nearOf(ctx context.Context, n redis.Cmdable, keys []string) (int, error) {
	alg := c.l.alg
	if len(keys) == 0 || (alg != limits.TokenBucket && alg != limits.FixedWindow && alg != limits.Concurrency) {
		return 0, nil
	}
	cmds := make([]redis.Cmder, len(keys))
	_, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			if alg == limits.Concurrency {
				cmds[i] = p.HGetAll(ctx, k)
			} else {
				cmds[i] = p.Get(ctx, k)
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return 0, err
	}
	near := 0
	for _, cmd := range cmds {
		var used, limit float64
		switch cmd := cmd.(type) {
		case *redis.MapStringStringCmd:
			used, limit = leasesHeld(cmd.Val(), c.now), float64(c.lim.Amount)
		case *redis.StringCmd:
			used, limit = c.used(cmd.Val())
		}
		if limit > 0 && used >= 0.8*limit {
			near++
		}
	}
	return near, nil
}

// used returns the permits a token bucket or fixed window partition has
// used as of now, and its limit (the policy's own).
func (c *counter) used(v string) (used, limit float64) {
	if c.l.alg == limits.FixedWindow {
		// The count of the current window (the only keys the pattern
		// matches).
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		return float64(n), float64(c.lim.Amount)
	}
	f, ok := doubles(v, 3)
	if !ok {
		return 0, 0
	}
	lim := c.lim
	// Available permits, their instant: refilled to now.
	capacity := float64(lim.Capacity())
	el := float64(c.now - (int64(f[1])*1e9 + int64(f[2])))
	a := f[0]
	if el > 0 {
		a = math.Min(capacity, a+el*(float64(lim.Amount)/float64(lim.Per)))
	}
	return capacity - math.Floor(a), capacity // whole permits, as in memory
}

// leasesHeld returns the cost of a concurrency partition's leases not
// expired at now (its fields as HGETALL returns them).
func leasesHeld(h map[string]string, now int64) float64 {
	head, ok := doubles(h["h"], 5)
	if !ok {
		return 0
	}
	rel := float64(now - int64(head[0])*1e9) // now, from the base second
	var held float64
	for k, v := range h {
		if len(k) != 9 || k[0] != 'l' {
			continue
		}
		if f, ok := doubles(v, 2); ok && f[0] > rel {
			held += f[1]
		}
	}
	return held
}

// doubles unpacks n little-endian float64s from v.
func doubles(v string, n int) ([]float64, bool) {
	if len(v) != 8*n {
		return nil, false
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i : 8*i+8])))
	}
	return out, true
}

// pattern is the SCAN pattern of the limiter's partition keys at now
// (the hash of a sliding log's pair; the counts of the window holding
// now, for a fixed window under lim).
func (l *limiter) pattern(lim *limits.Limit, now int64) string {
	p := globEscape(l.s.cfg.Prefix) + "{*}" + globEscape(l.infix)
	switch l.alg {
	case limits.SlidingLog:
		p += "h:"
	case limits.FixedWindow:
		if lim.Per > 0 {
			return p + "*" + string(appendWindow(nil, floorTo(now, int64(lim.Per))))
		}
	}
	return p + "*"
}

// globEscape escapes the characters SCAN's MATCH gives a meaning to.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\^`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
