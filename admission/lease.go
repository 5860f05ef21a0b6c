package admission

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// The lease keeper: a permit is held exactly while its work is alive.
//
// A concurrency permit is a lease that expires MaxHold after it was taken
// or last renewed, so that a crashed process cannot hold it for ever. The
// process doing the work renews it: each Controller owns a lease keeper,
// which every third of the shortest MaxHold renews the leases of every live
// ticket (admitted and not yet settled) that are a sixth of their MaxHold
// old or more, so a live lease is renewed at half its MaxHold at the
// latest, whatever the work is doing: a stream whose client stopped
// reading still counts until the gateway cuts it. Leases live because their
// process does, not because their client makes progress. A store that can
// (a backend.RenewBatcher, as the Redis store) renews every lease due in
// a run in one batch: with 10,000 open streams at a 30s MaxHold, one
// round trip per 256 leases every 10s, where one call per lease made
// about a thousand a second. A request waiting in a queue holds no
// concurrency permit (its earlier policies' go back while it waits, see
// queueSet.acquire), and what it takes once served starts its lease then.
//
// The keeper is in the controller rather than in the services (a gateway's
// stream loop, an HTTP middleware), so that every service gets it without
// code of its own, and it holds a ticket only weakly: a ticket dropped
// without being settled (a leak in the caller's code) is renewed no more
// once the garbage collector has found it unreachable, and its leases
// expire MaxHold later, as a crashed process's do.
//
// The keeper also keeps a shared store's in-flight figure true (a store
// that counts the leases its process holds without asking, a
// backend.Forgetter): a lease the keeper could not renew for its whole
// MaxHold (its store failing) has expired, and a ticket the collector
// found dropped holds nothing any more; the keeper makes the store forget
// both, and the first is then lost for its ticket (settling releases
// nothing, and Renew says so). So that it can for a dropped ticket,
// whose grants went with it, each ticket keeps a copy of its leases'
// grants beside it (keptLeases), which the keeper's shard holds.
//
// The admitted path pays for it with no allocation: a ticket holding a
// lease is entered in one of keeperShards small maps (a lock and a map
// assignment) and removed when settled. The keeper's timer runs only while
// a lease is held or a release waits to be retried.
//
// A release that cannot reach the store (a timeout, a paused or restarting
// Redis) is not forgotten: the keeper tries it again, after 100ms and then
// twice as long each time up to two seconds, until it lands or the lease
// would have expired anyway. Each failed attempt is reported to the
// observer (StoreError), the outcome of each retried release too when the
// observer is a ReleaseObserver (the metrics observer counts them), and
// the controller's logger says so, at most once per logEvery.

const (
	keeperShards    = 16
	retryFirst      = 100 * time.Millisecond
	retryMax        = 2 * time.Second
	logEvery        = 10 * time.Second
	keeperMinPeriod = time.Millisecond
)

// A ReleaseObserver is an Observer that also wants to know of
// concurrency releases its store failed: ReleaseRetry is called with
// outcome "retrying" when a release failed and is queued to be tried
// again, and then once with how it ended: "landed" (a retry reached the
// store) or "abandoned" (the lease expired first, and the store reclaims
// it on its own).
type ReleaseObserver interface {
	ReleaseRetry(policy, outcome string)
}

// The outcomes a ReleaseObserver is told.
const (
	releaseRetrying  = "retrying"
	releaseLanded    = "landed"
	releaseAbandoned = "abandoned"
)

// WithLogger sets the logger of the controller's own troubles (releases
// that could not reach their store); the default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *Controller) { c.keeper.log = l } }

// leaseKeeper renews the leases of a controller's live tickets and retries
// the releases its stores failed.
type leaseKeeper struct {
	c      *Controller
	log    *slog.Logger
	rel    ReleaseObserver // nil when the observer is not one
	shards [keeperShards]keeperShard
	next   atomic.Uint32 // the shard of the next ticket made
	live   atomic.Int64  // tickets entered in the shards
	armed  atomic.Bool   // a run is scheduled or running

	mu      sync.Mutex // guards what follows
	closed  bool
	timer   Timer     // the scheduled run, nil while none is or it runs
	due     time.Time // when timer fires
	pending []pendingRelease
	spare   []pendingRelease
	logged  time.Time // the last log line
	unsaid  int       // failures since, not logged
	// least is the shortest MaxHold of the leases the last run found
	// held, fresh (ns, atomic: read and written by every ticket entered,
	// without k.mu) that of the tickets entered since that run began (0:
	// none): a ticket admitted under another policy set than the
	// installed one (an earlier one, or its request's own) may hold a
	// lease shorter than any the installed set has, and the keeper runs
	// often enough for it too. period (ns, atomic) is the delay the
	// scheduled run was set with: a ticket whose leases need a run no
	// sooner takes no lock.
	least  time.Duration
	fresh  atomic.Int64
	period atomic.Int64

	walk   []keeperEntry // a run's copy of a shard, reused (runs never overlap)
	batch  []batchedRenewal
	mine   []batchedRenewal // the part of batch on one store
	ops    []backend.Op
	locked []*ticket // the tickets of batch, locked
}

// keeperShard holds some of the live tickets that hold leases, by their
// weak pointer, with the generation they were entered at and their
// leases' copies.
type keeperShard struct {
	mu   sync.Mutex
	live map[weak.Pointer[ticket]]keeperEntry
	_    [40]byte // one shard per cache line
}

type keeperEntry struct {
	wp     weak.Pointer[ticket]
	gen    uint64
	leases *keptLeases
}

// keptLeases are the copies of a ticket's grants that a store would
// count until told to forget them: made once per ticket (it is pooled),
// written by keep, Renew and the keeper's run, and read once the ticket
// is gone.
type keptLeases struct {
	mu   sync.Mutex
	list []keptLease
}

// set makes kl the copies of t's leases that a store counts; t.lease is
// held.
func (kl *keptLeases) set(t *ticket) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	clear(kl.list)
	kl.list = kl.list[:0]
	for i := range t.ops {
		if h := &t.ops[i]; h.renewable() && !h.local {
			if f, ok := h.p.limiter.(backend.Forgetter); ok {
				kl.list = append(kl.list, keptLease{op: i, f: f, grant: h.grant})
			}
		}
	}
}

// keptLease is the copy of op's grant, for f to forget.
type keptLease struct {
	op    int
	f     backend.Forgetter
	grant backend.Grant
}

// forget has the store of each lease in kl forget it.
func (kl *keptLeases) forget() {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	for i := range kl.list {
		kl.list[i].f.Forget(&kl.list[i].grant)
	}
	clear(kl.list)
	kl.list = kl.list[:0]
}

// lost clears the copy of op's grant: its lease is gone (the store found
// it expired, or it was forgotten).
func (kl *keptLeases) lost(op int) {
	if kl == nil { // the ticket never held a lease the keeper renews
		return
	}
	kl.mu.Lock()
	defer kl.mu.Unlock()
	for i := range kl.list {
		if kl.list[i].op == op {
			kl.list[i].grant.Stamp = 0
		}
	}
}

// pendingRelease is a release its store failed, to try again.
type pendingRelease struct {
	p        *policy
	l        backend.Limiter
	key      string // a copy: the ticket's buffer is reused
	lim      limits.Limit
	grant    backend.Grant
	deadline time.Time // the lease expires then: no point trying after
	at       time.Time // the next attempt
	delay    time.Duration
}

// init sets up k for c, once its options are applied.
func (k *leaseKeeper) init(c *Controller) {
	k.c = c
	if k.log == nil {
		k.log = slog.Default()
	}
	k.rel, _ = c.obs.(ReleaseObserver)
	for i := range k.shards {
		k.shards[i].live = make(map[weak.Pointer[ticket]]keeperEntry)
	}
}

// newTicket makes a ticket for c's pool. Its weak pointer and lease
// copies are made when it first holds a lease (see keep), once: most
// tickets never do, and a ticket held pending (a two-phase request) costs
// less without them.
func (k *leaseKeeper) newTicket() *ticket {
	return &ticket{c: k.c, shard: uint8(k.next.Add(1) % keeperShards)}
}

// renewable reports whether h holds a lease the keeper can renew.
func (h *held) renewable() bool {
	if !h.taken || h.p.Algorithm != limits.Concurrency || h.grant.Stamp == 0 {
		return false
	}
	if h.local {
		return true // the in-memory store renews
	}
	return h.p.renewer
}

// keep enters t, just admitted (or continued), in the keeper when it holds
// a lease to renew.
func (k *leaseKeeper) keep(t *ticket) {
	hold := time.Duration(0) // the shortest MaxHold of t's leases
	for i := range t.ops {
		if h := &t.ops[i]; h.renewable() && (hold == 0 || h.lim.MaxHold < hold) {
			hold = h.lim.MaxHold
		}
	}
	if hold == 0 {
		return
	}
	// Under the ticket's lock: a run may still hold this ticket from an
	// earlier entry (its previous life in the pool, or before Continue).
	if t.leases == nil {
		t.self, t.leases = weak.Make(t), &keptLeases{}
	}
	t.lease.Lock()
	t.kept = true
	t.leases.set(t)
	t.lease.Unlock()
	s := &k.shards[t.shard]
	s.mu.Lock()
	s.live[t.self] = keeperEntry{gen: t.gen.Load(), leases: t.leases}
	s.mu.Unlock()
	k.live.Add(1)
	for {
		f := k.fresh.Load()
		if f != 0 && f <= int64(hold) || k.fresh.CompareAndSwap(f, int64(hold)) {
			break
		}
	}
	if k.armed.CompareAndSwap(false, true) {
		k.arm(k.c.clock.Now())
		return
	}
	d := holdPeriod(hold)
	if p := k.period.Load(); p > 0 && int64(d) >= p {
		// The scheduled run is due within its period from now: soon
		// enough. (A run being scheduled reads fresh after setting
		// period to 0, so it sees t's hold, or t takes the lock.)
		return
	}
	// A run is scheduled, perhaps too late for t's leases: bring it
	// forward.
	now := k.c.clock.Now()
	k.mu.Lock()
	if k.timer != nil && !k.closed && now.Add(d).Before(k.due) && k.timer.Stop() {
		k.schedule(now, d)
	}
	k.mu.Unlock()
}

// schedule sets the next run d after now; k.mu is held.
func (k *leaseKeeper) schedule(now time.Time, d time.Duration) {
	k.timer, k.due = k.c.clock.AfterFunc(d, k.run), now.Add(d)
	k.period.Store(int64(d))
}

// shorter returns the shorter of two MaxHolds, 0 meaning none.
func shorter(a, b time.Duration) time.Duration {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// holdPeriod is how often the keeper runs for a lease of MaxHold hold.
func holdPeriod(hold time.Duration) time.Duration { return max(hold/3, keeperMinPeriod) }

// drop removes t from the keeper, waiting for a run renewing it to end:
// from then on the keeper does not touch t.
func (k *leaseKeeper) drop(t *ticket) {
	if !t.kept {
		return
	}
	t.lease.Lock()
	t.kept = false
	t.lease.Unlock()
	s := &k.shards[t.shard]
	s.mu.Lock()
	delete(s.live, t.self)
	s.mu.Unlock()
	k.live.Add(-1)
}

// period is how often the keeper runs while leases are held: a third of
// the shortest MaxHold of the installed concurrency policies.
func (cfg *PolicySet) keeperPeriod() time.Duration {
	least := limits.DefaultMaxHold
	for _, p := range cfg.policies {
		if p.Algorithm == limits.Concurrency {
			least = min(least, p.base.MaxHold)
		}
	}
	return holdPeriod(least)
}

// arm schedules the next run (armed is set): after a period, or at the
// next retry when sooner.
func (k *leaseKeeper) arm(now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	k.period.Store(0) // before fresh is read: see keep
	d := k.c.cfg.Load().keeperPeriod()
	if hold := shorter(k.least, time.Duration(k.fresh.Load())); hold != 0 {
		d = min(d, holdPeriod(hold))
	}
	for i := range k.pending {
		d = min(d, max(k.pending[i].at.Sub(now), 0))
	}
	k.schedule(now, d)
}

// run renews what is due, retries the failed releases due, and schedules
// the next run while there is anything left to do.
func (k *leaseKeeper) run() {
	now := k.c.clock.Now()
	k.fresh.Store(0) // the tickets entered from here on are walked, or say so
	least := k.renewAll(now)
	k.retry(now)
	k.mu.Lock()
	k.timer = nil
	k.least = least
	more := len(k.pending) > 0
	k.mu.Unlock()
	// Disarmed first, then checked: a ticket entered meanwhile either is
	// seen here or arms a run itself.
	k.armed.Store(false)
	if (more || k.live.Load() > 0) && k.armed.CompareAndSwap(false, true) {
		k.arm(k.c.clock.Now())
	}
}

// renewAll renews the due leases of every live ticket: those on a store
// that renews in batches (a backend.RenewBatcher) together, one call per
// store for up to renewBatchMax of them, the others one by one. The
// tickets of a batch stay locked until it returns. It returns the
// shortest MaxHold of the leases it found held (0: none).
func (k *leaseKeeper) renewAll(now time.Time) time.Duration {
	least := time.Duration(0)
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		k.walk = k.walk[:0]
		for wp, e := range s.live {
			e.wp = wp
			k.walk = append(k.walk, e)
		}
		s.mu.Unlock()
		for _, e := range k.walk {
			t := e.wp.Value()
			if t == nil {
				// Dropped unsettled: its leases expire on their own, and
				// its process holds them no more.
				s.mu.Lock()
				if _, ok := s.live[e.wp]; ok {
					delete(s.live, e.wp)
					k.live.Add(-1)
					e.leases.forget()
				}
				s.mu.Unlock()
				continue
			}
			t.lease.Lock()
			batched := false
			if t.kept && t.gen.Load() == e.gen {
				for j := range t.ops {
					h := &t.ops[j]
					if !h.renewable() {
						continue
					}
					least = shorter(least, h.lim.MaxHold)
					if now.Sub(h.renewed) < h.lim.MaxHold/6 {
						continue
					}
					if rb := h.p.renewBatcher; rb != nil && !h.local {
						k.batch = append(k.batch, batchedRenewal{rb: rb, t: t, j: j})
						batched = true
					} else {
						k.renewOp(t, j, now)
					}
				}
			}
			if batched {
				k.locked = append(k.locked, t)
			} else {
				t.lease.Unlock()
			}
			if len(k.batch) >= renewBatchMax {
				k.flush(now)
			}
		}
	}
	k.flush(now)
	clear(k.walk)
	return least
}

// renewBatchMax bounds the leases renewed in one batch.
const renewBatchMax = 1024

// batchedRenewal is a lease due for renewal in a batch: t's op j, on rb.
type batchedRenewal struct {
	rb backend.RenewBatcher
	t  *ticket
	j  int
}

// flush renews the leases of k.batch, one call per store, and unlocks
// their tickets.
func (k *leaseKeeper) flush(now time.Time) {
	for todo := k.batch; len(todo) > 0; {
		rb := todo[0].rb
		ops, rest, mine := k.ops[:0], todo[:0], k.mine[:0]
		for _, b := range todo {
			if b.rb != rb {
				rest = append(rest, b)
				continue
			}
			h := &b.t.ops[b.j]
			ops = append(ops, backend.Op{Limiter: h.p.limiter, Key: h.key, Limit: *h.lim, Grant: h.grant})
			mine = append(mine, b)
		}
		_ = rb.RenewBatch(context.Background(), ops, now)
		for i, b := range mine {
			h, op := &b.t.ops[b.j], &ops[i]
			if op.Err != nil {
				k.c.settleFailed(h, op.Err)
			} else if op.Grant.Expired > 0 {
				k.c.obs.LeaseExpired(h.p.Name, int(op.Grant.Expired))
			}
			k.renewedOp(b.t, b.j, &op.Grant, op.Err, now)
		}
		clear(ops)
		clear(mine)
		k.ops, k.mine = ops[:0], mine[:0]
		todo = rest
	}
	clear(k.batch)
	k.batch = k.batch[:0]
	for _, t := range k.locked {
		t.lease.Unlock()
	}
	clear(k.locked)
	k.locked = k.locked[:0]
}

// renewOp renews the lease of t's op j on its own; t.lease is held.
func (k *leaseKeeper) renewOp(t *ticket, j int, now time.Time) {
	g := t.ops[j].grant
	err := k.c.renewGrant(&t.ops[j], &g, now)
	k.renewedOp(t, j, &g, err, now)
}

// renewedOp records the renewal of the lease of t's op j: g, a copy of
// its grant the store renewed, or err when the store failed (reported
// already); t.lease is held. Unlike Ticket.Renew, it does not write the
// op's grant but its Stamp, cleared when the lease was lost (settling
// then releases nothing, and the next Ticket.Renew says so), so that the
// ticket's owner may read the grant's figures (Statuses) meanwhile. A
// lease that could not be renewed for its whole MaxHold (the store
// failing all along) has expired: its store forgets it, and it is lost
// too.
func (k *leaseKeeper) renewedOp(t *ticket, j int, g *backend.Grant, err error, now time.Time) {
	h := &t.ops[j]
	switch {
	case err != nil:
		// Tried again at the next run.
	case g.Stamp == 0:
		h.grant.Stamp, h.lost = 0, true
	default:
		h.renewed = now
	}
	if h.grant.Stamp != 0 && now.Sub(h.renewed) >= h.lim.MaxHold {
		if f, ok := h.limiterOf().(backend.Forgetter); ok {
			f.Forget(&h.grant)
		}
		h.grant.Stamp, h.lost = 0, true
	}
	if h.grant.Stamp == 0 {
		t.leases.lost(j)
	}
}

// renewGrant renews the lease of g, h's grant or a copy of it, at now, and
// reports what the store found expired.
func (c *Controller) renewGrant(h *held, g *backend.Grant, now time.Time) error {
	rn, ok := h.limiterOf().(backend.Renewer)
	if !ok {
		return errNoRenew(h)
	}
	if err := rn.Renew(context.Background(), h.key, h.lim, g, now); err != nil {
		c.settleFailed(h, err)
		return wrapRenew(h, err)
	}
	if g.Expired > 0 {
		c.obs.LeaseExpired(h.p.Name, int(g.Expired))
	}
	return nil
}

// released is called when the release of h, a concurrency grant, failed
// with err: it is queued to be tried again until its lease expires.
func (k *leaseKeeper) released(h *held, err error) {
	now := k.c.clock.Now()
	deadline := h.renewed.Add(h.lim.MaxHold)
	if h.grant.Stamp == 0 || !now.Before(deadline) {
		return
	}
	pr := pendingRelease{p: h.p, l: h.limiterOf(), key: string([]byte(h.key)), lim: *h.lim, grant: h.grant,
		deadline: deadline, at: now.Add(retryFirst), delay: retryFirst}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.pending = append(k.pending, pr)
	k.note(now, failedMsg, pr.p, err, len(k.pending))
	k.mu.Unlock()
	if k.rel != nil {
		k.rel.ReleaseRetry(pr.p.Name, releaseRetrying)
	}
	if k.armed.CompareAndSwap(false, true) {
		k.arm(now)
		return
	}
	// A run is scheduled, perhaps for much later: bring it forward.
	k.mu.Lock()
	if k.timer != nil && !k.closed && pr.at.Before(k.due) && k.timer.Stop() {
		k.schedule(now, retryFirst)
	}
	k.mu.Unlock()
}

const failedMsg = "admission: releasing a concurrency permit failed; retrying until it lands or its lease expires"

// note logs msg about a release of p's, at most once per logEvery, with
// the count of the notes not logged since the last; k.mu is held.
func (k *leaseKeeper) note(now time.Time, msg string, p *policy, err error, pending int) {
	k.unsaid++
	if !k.logged.IsZero() && now.Sub(k.logged) < logEvery {
		return
	}
	args := []any{"policy", p.Name, "store", p.Store, "failures", k.unsaid, "pending", pending}
	if err != nil {
		args = append(args, "error", err)
	}
	k.log.Warn(msg, args...)
	k.logged, k.unsaid = now, 0
}

// retry tries again the failed releases that are due.
func (k *leaseKeeper) retry(now time.Time) {
	k.mu.Lock()
	due := k.spare[:0]
	kept := k.pending[:0]
	for _, pr := range k.pending {
		if !now.Before(pr.at) {
			due = append(due, pr)
		} else {
			kept = append(kept, pr)
		}
	}
	k.pending = kept
	k.mu.Unlock()
	for i := range due {
		pr := &due[i]
		if !now.Before(pr.deadline) {
			k.report(pr.p, releaseAbandoned)
			k.mu.Lock()
			k.note(now, "admission: a concurrency permit's release never reached its store; it was held until its lease expired", pr.p, nil, len(k.pending))
			k.mu.Unlock()
			continue
		}
		err := pr.l.Release(context.Background(), pr.key, &pr.lim, &pr.grant, now)
		if err == nil {
			k.report(pr.p, releaseLanded)
			continue
		}
		k.c.obs.StoreError(StoreEvent{Policy: pr.p.Name, Store: pr.p.Store, Err: err, Action: pr.p.OnStoreError})
		pr.delay = min(2*pr.delay, retryMax)
		pr.at = now.Add(pr.delay)
		k.mu.Lock()
		k.pending = append(k.pending, *pr)
		k.note(now, failedMsg, pr.p, err, len(k.pending))
		k.mu.Unlock()
	}
	clear(due)
	k.mu.Lock()
	k.spare = due[:0]
	k.mu.Unlock()
}

func (k *leaseKeeper) report(p *policy, outcome string) {
	if k.rel != nil {
		k.rel.ReleaseRetry(p.Name, outcome)
	}
}

// Close stops the controller's lease keeper: the leases of live tickets
// are renewed no more, and releases that failed are not tried again, so
// what they hold expires MaxHold after its last renewal, as if the process
// had stopped. Settle the tickets first (a draining server) to give their
// permits back at once. The controller still decides requests after Close.
// Close is idempotent.
func (c *Controller) Close() error {
	k := &c.keeper
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	k.pending = nil
	return nil
}
