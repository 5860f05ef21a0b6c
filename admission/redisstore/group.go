package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxSending is how many calls or pipelines a queue has on their way at
// once. With two, the server is left idle while the client reads a
// pipeline's replies, wakes its callers and sends the next one; with
// three, one more is on its way meanwhile. Alternating rounds of
// BenchmarkRedisAdmit/parallel=8 measured 0.76× the peer's time with
// three against 0.84× with two (13 rounds of 16 faster, the CPU per
// decision the same), and parallel=64 no worse. Three callers alone never
// wait for each other.
const maxSending = 3

// A groupQueue shares the round trips of the script calls bound for one
// Redis node (group commit): decisions, settlements and renewals alike. A
// call arriving while fewer than maxSending are on their way to the node
// is sent at once, as a single command, on its caller's goroutine, so no
// wait is added at low concurrency; otherwise it waits, and when the
// first one on its way returns every call that queued meanwhile goes out
// in one pipeline, sent by a goroutine that lives while calls keep
// queueing. A call so waits for company at most one round trip. Each call
// stays its own script call, atomic and exact; batching only shares the
// round trip, which under load saves the client and the server most of
// each call's cost.
//
// Each call keeps its own deadlines (Config.Timeout from its start to be
// sent, then Config.Timeout from its sending for its answer, or its
// caller's deadline, whichever is earlier) and its own outcome: a call
// whose deadline passes returns at once, queued or in a pipeline being
// sent, and the others are not affected; a script error answers its call
// only. A round trip, one call or a pipeline, is one count in the
// breaker (judge).
// A pipeline is bounded by the latest deadline of its calls and is not
// cancelled when one of its callers gives up.
type groupQueue struct {
	mu      sync.Mutex
	sending int     // calls or batches on their way, at most maxSending
	waiting []*call // queued for the next batch
	spare   []*call // a batch's slice, reused
}

// queueFor returns the group queue of the node c's keys are bound for:
// the store's one queue on a single node, the queue of the key's master
// on Cluster (its shard on Ring); c.deadline bounds finding the master.
// The queues are kept per node client, so
// their number is that of the nodes the client has known.
func (s *Store) queueFor(ctx context.Context, c *call) *groupQueue {
	if !s.sharded || len(c.keys) == 0 {
		return &s.group
	}
	var node *redis.Client
	var err error
	switch cl := s.client.(type) {
	case *redis.ClusterClient:
		// Finding the master may load the cluster's slots: within the
		// call's deadline.
		kctx, cancel := context.WithDeadline(ctx, c.deadline)
		node, err = cl.MasterForKey(kctx, c.keys[0])
		cancel()
	case *redis.Ring:
		node, err = cl.GetShardClientForKey(c.keys[0])
	}
	if err != nil || node == nil {
		// The topology is unknown for now: the pipeline's own routing
		// will say what it can.
		return &s.group
	}
	if q, ok := s.nodes.Load(node); ok {
		return q.(*groupQueue)
	}
	q, _ := s.nodes.LoadOrStore(node, &groupQueue{})
	return q.(*groupQueue)
}

// run calls script with c's keys and arguments through the breaker, the
// timeout and the node's group queue, and recycles c. op names the call
// for the observer ("acquire", "batch", "settle", "renew") and policies
// is its number of ops.
func (s *Store) run(ctx context.Context, script *script, op string, policies int, c *call) (string, error) {
	probe, ok := s.brk.allow()
	if !ok {
		s.putCall(c)
		return "", s.refused(ctx, op, policies)
	}
	start := time.Now()
	c.probe = probe
	// A settlement is off the request's path: once sent, its caller
	// giving up does not cancel it (queued, it leaves).
	c.detached = op == "settle"
	c.start = start
	c.deadline = start.Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok {
		c.callerDeadline = d
		if d.Before(c.deadline) {
			c.deadline = d
		}
	}
	reply, err := s.queueFor(ctx, c).run(s, ctx, script, c)
	return reply, s.finish(ctx, op, policies, start, probe, err)
}

// judge counts a round trip sent at sent, bounded by deadline, in the
// breaker: an answer is a success; an error is a failure of Redis unless
// the round trip's callers gave up (ctx, or a deadline of theirs earlier
// than the store's Timeout, passed). probe is the breaker's ticket of the
// probe the round trip carried, if any (0 otherwise).
func (s *Store) judge(ctx context.Context, sent, deadline time.Time, probe uint64, err error) {
	switch {
	case err == nil:
		s.brk.success()
	case ctx.Err() != nil:
	case time.Now().Before(deadline) || !deadline.Before(sent.Add(s.cfg.Timeout)):
		s.brk.failure(probe)
	}
}

// run sends c at once when q is idle, on the caller's goroutine, and
// otherwise in the next batch; c.deadline is set, and ctx is the caller's.
// A queued call waits on a timer of its own, not on a context: no context
// is made for it, and when the deadline passes the timer wakes the caller
// directly, where a context's deadline would first run a goroutine to
// cancel it (one more wait for a CPU on a loaded machine). The time a
// call waits in the queue is not the server's: a queued call has Timeout
// to be sent, and once sent Timeout again for its answer (both within its
// caller's deadline), so that a burst queued behind a round trip does not
// spend its answer's time waiting for its turn.
func (q *groupQueue) run(s *Store, ctx context.Context, script *script, c *call) (string, error) {
	c.script = script
	q.mu.Lock()
	if q.sending < maxSending {
		q.sending++
		q.mu.Unlock()
		parent := ctx
		if c.detached {
			parent = context.WithoutCancel(ctx)
		}
		ectx, cancel := context.WithDeadline(parent, c.deadline)
		reply, err := s.eval(ectx, script, c)
		cancel()
		s.judge(parent, c.start, c.deadline, c.probe, err)
		s.putCall(c)
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.sending--
			q.mu.Unlock()
		} else {
			// The calls that queued meanwhile go out together, sent by a
			// goroutine of their own so that this call returns now.
			batch := q.take(s.cfg.Timeout)
			q.mu.Unlock()
			go q.flush(s, batch)
		}
		return reply, err
	}
	q.waiting = append(q.waiting, c)
	deadline := c.deadline // take changes it, under q.mu
	q.mu.Unlock()
	for {
		if c.timer == nil {
			c.timer = time.NewTimer(time.Until(deadline))
		} else {
			c.timer.Reset(time.Until(deadline))
		}
		var gaveUp error
		select {
		case <-c.done:
		case <-ctx.Done():
			gaveUp = ctx.Err()
		case <-c.timer.C:
			gaveUp = context.DeadlineExceeded
		}
		c.timer.Stop()
		if gaveUp == nil {
			break
		}
		how, sent := q.leave(c, gaveUp == context.DeadlineExceeded)
		switch how {
		case left:
			s.putCall(c)
			return "", gaveUp
		case gone:
			return "", gaveUp // the batch's sender recycles c
		case sending:
			deadline = sent // its queue time is over: wait for its answer
			continue
		}
		<-c.done
		break
	}
	reply, err := c.reply, c.err
	s.putCall(c)
	return reply, err
}

// take returns the calls waiting, as the next batch, and gives each
// timeout from now for its answer (within its caller's deadline); q.mu is
// held.
func (q *groupQueue) take(timeout time.Duration) []*call {
	now := time.Now()
	for _, c := range q.waiting {
		c.sent, c.start = true, now
		c.deadline = now.Add(timeout)
		if !c.callerDeadline.IsZero() && c.callerDeadline.Before(c.deadline) {
			c.deadline = c.callerDeadline
		}
	}
	batch := append(q.spare[:0], q.waiting...)
	clear(q.waiting)
	q.waiting, q.spare = q.waiting[:0], nil
	return batch
}

// flush sends batch, and then the calls that queued meanwhile, until none
// is waiting.
func (q *groupQueue) flush(s *Store, batch []*call) {
	for {
		q.send(s, batch)
		var gone []*call
		q.mu.Lock()
		for _, b := range batch {
			if b.gone {
				gone = append(gone, b)
			} else {
				b.finished = true
				b.done <- struct{}{}
			}
		}
		clear(batch)
		q.spare = batch[:0]
		batch = nil
		if len(q.waiting) == 0 {
			q.sending--
		} else {
			batch = q.take(s.cfg.Timeout)
		}
		q.mu.Unlock()
		for _, b := range gone {
			s.putCall(b)
		}
		if batch == nil {
			return
		}
	}
}

// What leave did with a call whose caller gives up.
const (
	left    = iota // took it out of the queue
	gone           // marked it gone: its batch is being sent, whose sender recycles it
	stayed         // nothing: its batch has returned
	sending        // nothing: its batch is being sent, and its answer's deadline is later
)

// leave takes c out of the queue when it is still waiting; otherwise,
// unless its batch has returned, it marks c gone. When queued says the
// caller's wait ended at its queue deadline and c's batch was sent since
// with a later deadline for its answer, c stays, and leave returns that
// deadline.
func (q *groupQueue) leave(c *call, queued bool) (int, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			return left, time.Time{}
		}
	}
	if c.finished {
		return stayed, time.Time{}
	}
	if queued && c.sent && time.Now().Before(c.deadline) {
		return sending, c.deadline
	}
	c.gone = true
	return gone, time.Time{}
}

// send sends batch, one call or one pipeline, bounded by the latest
// deadline of its calls and cancelled by none of their callers, and sets
// each call's reply and error. The calls the server has no script for
// (its first call, a restart, SCRIPT FLUSH, a Cluster node that never ran
// it) are sent again with the script's source (EVAL, which loads it), in
// one more pipeline. Only the sender touches the calls' commands.
func (q *groupQueue) send(s *Store, batch []*call) {
	sent := batch[0].start // when take gave the batch its deadlines
	var latest time.Time
	var probe uint64 // the breaker's probe, if the batch carries it
	for _, b := range batch {
		if b.deadline.After(latest) {
			latest = b.deadline
		}
		probe = max(probe, b.probe)
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	if len(batch) == 1 {
		b := batch[0]
		b.reply, b.err = s.eval(ctx, b.script, b)
		s.judge(context.Background(), sent, latest, probe, b.err)
		return
	}
	cmds := make([]*redis.Cmd, 0, len(batch))
	pipe := s.client.Pipeline()
	for _, b := range batch {
		cmds = append(cmds, pipe.Do(ctx, b.command("evalsha", b.script.sha)...))
	}
	_, _ = pipe.Exec(ctx)
	var again redis.Pipeliner
	for i, b := range batch {
		b.reply, b.err = cmds[i].Text()
		if noScript(b.err) {
			if again == nil {
				again = s.client.Pipeline()
			}
			cmds[i] = again.Do(ctx, b.command("eval", b.script.src)...)
		} else {
			cmds[i] = nil
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
		for i, b := range batch {
			if cmds[i] != nil {
				b.reply, b.err = cmds[i].Text()
			}
		}
	}
	// The pipeline is one answer of the server: one count in the breaker.
	var err error
	for _, b := range batch {
		if b.err != nil {
			err = b.err
			break
		}
	}
	s.judge(context.Background(), sent, latest, probe, err)
}
