package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settlements are not on a request's critical path (the answer is already
// on its way), so the store coalesces them: a settle that arrives while
// another is being sent waits for it to return, and the next sender
// takes every settle that queued meanwhile in one pipeline (group commit).
// A lone settle is sent at once, as a single call. Each settle is still
// its own script call, atomic and applied once; batching only shares the
// network round trip, which under load saves the client and the server a
// large part of each call's cost. A settle waits at most for one batch in
// flight and then its own, each bounded by Config.Timeout.
type settleQueue struct {
	mu      sync.Mutex
	busy    bool // a batch is being sent
	waiting []*queuedSettle
}

// queuedSettle is one settle call waiting for, or in, a batch.
type queuedSettle struct {
	script *script
	c      *call
	reply  string
	err    error
	lead   bool          // set before done closes: send the next batch
	done   chan struct{} // for a queued call: closed when reply and err are set, or to lead
}

// settleRun runs a settle script through the queue; policies is the
// number of ops, for the observer.
func (s *Store) settleRun(ctx context.Context, script *script, policies int, c *call) (string, error) {
	const op = "settle"
	if !s.brk.allow() {
		return "", s.refused(op, policies)
	}
	var start time.Time
	if s.calls != nil {
		start = time.Now()
	}
	me := &queuedSettle{script: script, c: c}
	q := &s.settles
	q.mu.Lock()
	if q.busy {
		me.done = make(chan struct{})
		q.waiting = append(q.waiting, me)
		q.mu.Unlock()
		select {
		case <-me.done:
		case <-ctx.Done():
			if q.leave(me) {
				return "", s.finish(ctx, op, policies, start, ctx.Err())
			}
			<-me.done // already in a batch being sent
		}
		if !me.lead {
			return me.reply, s.finish(ctx, op, policies, start, me.err)
		}
		q.mu.Lock()
	}
	// Lead: send this settle with every one waiting (none when the queue
	// was idle), then hand the queue to the first that arrived meanwhile.
	q.busy = true
	batch := append([]*queuedSettle{me}, q.waiting...)
	clear(q.waiting)
	q.waiting = q.waiting[:0]
	q.mu.Unlock()
	s.sendSettles(ctx, batch)
	for _, b := range batch[1:] {
		close(b.done)
	}
	q.mu.Lock()
	if len(q.waiting) > 0 {
		next := q.waiting[0]
		q.waiting = append(q.waiting[:0], q.waiting[1:]...)
		next.lead = true
		close(next.done)
	} else {
		q.busy = false
	}
	q.mu.Unlock()
	return me.reply, s.finish(ctx, op, policies, start, me.err)
}

// leave takes qs out of the queue; it reports false when qs is already in
// a batch.
func (q *settleQueue) leave(qs *queuedSettle) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range q.waiting {
		if w == qs {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// sendSettles sends batch, one call or one pipeline, within Config.Timeout
// (a caller giving up does not cancel the others' calls), and sets each
// reply and error.
func (s *Store) sendSettles(ctx context.Context, batch []*queuedSettle) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	if len(batch) == 1 {
		b := batch[0]
		b.reply, b.err = s.eval(cctx, b.script, b.c)
		return
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, b := range batch {
		cmds[i] = pipe.Do(cctx, b.c.command("evalsha", b.script.sha)...)
	}
	_, _ = pipe.Exec(cctx)
	for i, b := range batch {
		b.reply, b.err = cmds[i].Text()
		if redis.HasErrorPrefix(b.err, "NOSCRIPT") {
			// The server does not have the script (a restart, a flush, a
			// Cluster node that never ran it): EVAL loads it.
			b.reply, b.err = s.client.Do(cctx, b.c.command("eval", b.script.src)...).Text()
		}
	}
}
