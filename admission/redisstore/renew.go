package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

var _ backend.RenewBatcher = (*Store)(nil)

// renewBatch bounds the renewals of one pipeline (one round trip).
const renewBatch = 256

// renewCall returns the call renewing the lease of g, of l's partition
// key, with the renew script.
func (l *limiter) renewCall(key string, lim *limits.Limit, g *backend.Grant, now time.Time) *call {
	s := l.s
	c := s.getCall()
	s.blobHeader(&c.blob, nowNanos(now), clockServer)
	c.blob.int(g.Stamp, maxHold(lim))
	c.putKey(func(b []byte) []byte { return l.appendKey(b, key) })
	c.flushKeys()
	c.args = append(c.args, &c.blob)
	return c
}

// renewed applies the renew script's reply to g.
func (l *limiter) renewed(lim *limits.Limit, g *backend.Grant, reply string) error {
	r := floats{s: reply}
	held, inflight, expired := r.float() == 1, r.int(), r.int()
	if r.err || len(r.s) != 0 {
		return fmt.Errorf("redisstore: malformed reply %q", reply)
	}
	if !held {
		g.Stamp = 0
		l.held.Add(-g.Taken)
	}
	g.Expired = int32(expired)
	g.Remaining = lim.Amount - min(inflight, lim.Amount)
	return nil
}

// renews reports whether op has a lease for the renew script.
func renews(op *backend.Op) bool {
	l, ok := op.Limiter.(*limiter)
	return ok && l.alg == limits.Concurrency && op.Grant.Stamp != 0
}

// RenewBatch implements backend.RenewBatcher: the renew script once per
// op holding a lease, up to renewBatch calls in one pipeline (one round
// trip, one count in the breaker, bounded by the store's Timeout; the
// calls of a node without the script yet take one more, with a Timeout
// of its own), each call its own script, atomic and exact as Renew's. On
// Cluster the client splits a pipeline by node.
func (s *Store) RenewBatch(ctx context.Context, ops []backend.Op, now time.Time) error {
	for i := range ops {
		if l, ok := ops[i].Limiter.(*limiter); !ok || l.s != s {
			return fmt.Errorf("redisstore: op %d: limiter %T is not from this store", i, ops[i].Limiter)
		}
	}
	var errs []error
	for start := 0; start < len(ops); start += renewBatch {
		if err := s.renewPipeline(ctx, ops[start:min(start+renewBatch, len(ops))], now); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// renewPipeline renews the leases of ops in one pipeline.
func (s *Store) renewPipeline(ctx context.Context, ops []backend.Op, now time.Time) error {
	n := 0
	for i := range ops {
		if renews(&ops[i]) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	fail := func(err error) error {
		for i := range ops {
			if renews(&ops[i]) {
				ops[i].Err = err
			}
		}
		return err
	}
	probe, ok := s.brk.allow()
	if !ok {
		return fail(s.refused(ctx, "renew", n))
	}
	start := time.Now()
	deadline := start.Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	calls := make([]*call, len(ops))
	cmds := make([]*redis.Cmd, len(ops))
	defer func() {
		for _, c := range calls {
			if c != nil {
				s.putCall(c)
			}
		}
	}()
	pipe := s.client.Pipeline()
	for i := range ops {
		if op := &ops[i]; renews(op) {
			calls[i] = op.Limiter.(*limiter).renewCall(op.Key, &op.Limit, &op.Grant, now)
			cmds[i] = pipe.Do(pctx, calls[i].command("evalsha", renewScript.sha)...)
		}
	}
	_, _ = pipe.Exec(pctx)
	s.loadRenew(ctx, cmds, calls)
	var first error
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		op := &ops[i]
		reply, err := cmd.Text()
		if err == nil {
			err = op.Limiter.(*limiter).renewed(&op.Limit, &op.Grant, reply)
		}
		if err != nil && first == nil {
			first = err
		}
		op.Err = err
	}
	s.judge(ctx, start, deadline, probe, first)
	// Each op keeps its own outcome: on Cluster and Ring the pipeline
	// spans nodes, and one node failing says nothing of the leases the
	// others renewed.
	return s.finish(ctx, "renew", n, start, probe, first)
}

// loadRenew sends again, with the script's source, the calls of cmds
// whose node had no renew script, and replaces their commands. Their
// node answered, but on Cluster and Ring the pipeline waited for its
// slowest node, perhaps until the deadline, so these calls have a
// Timeout of their own (within ctx's deadline).
func (s *Store) loadRenew(ctx context.Context, cmds []*redis.Cmd, calls []*call) {
	var again []int
	for i, cmd := range cmds {
		if cmd != nil && noScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	deadline := time.Now().Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, i := range again {
		cmds[i] = pipe.Do(actx, calls[i].command("eval", renewScript.src)...)
	}
	_, _ = pipe.Exec(actx)
}
