package admission

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// pollInterval is how often a queue whose head does not fit retries when
// nothing local will wake it: a concurrency permit released by another
// replica, or a lease expiring.
const pollInterval = 100 * time.Millisecond

// queueSet holds the queues of one policy, one per partition with waiters.
// Within a partition's queue, waiters are served by priority (or, when the
// policy reserves shares, by class in proportion to the shares), then
// round robin across tenants, then oldest or newest first within a tenant,
// so one tenant's backlog cannot delay another tenant's request behind all
// of it.
type queueSet struct {
	c      *Controller
	st     *policyState
	seed   maphash.Seed
	shards [16]qshard
}

type qshard struct {
	mu    sync.Mutex
	m     map[string]*queue
	slots map[string]*slotLoad // concurrency partitions with shares
}

// maxSlotLoads bounds the partitions of one queue shard whose in-flight
// work is tracked by class; beyond it, a partition's shares weigh what
// it admits instead.
const maxSlotLoads = 1024

// slotLoad is what each priority holds in flight on one concurrency
// partition whose policy reserves shares: there a share is a share of the
// permits held, so a class of long requests cannot fill the partition
// with them while a class of short ones waits.
type slotLoad struct {
	byPrio map[int]int64   // cost in flight by priority
	leases map[int64]lease // by the grant's stamp
	swept  int             // len(leases) after the last sweep
}

// lease is one admitted request's part of a slotLoad.
type lease struct {
	prio    int
	cost    int64
	expires int64 // when the store reclaims it unless renewed, unix nanoseconds
}

type queue struct {
	key     string
	n       int
	cost    int64        // the waiters' estimates, summed
	classes []*prioClass // by priority, highest first
	timer   Timer
	timerAt int64
	// shares are the policy's Queue.Shares when the queue formed, and
	// groups their state: one per share, then one for every other
	// priority. Nil without shares: strict priority.
	shares  []limits.Share
	groups  []shareGroup
	virtual float64 // the vt the last group served had when served
	// slots, for a concurrency partition, is what its groups hold in
	// flight: the group holding least for its share goes next.
	slots *slotLoad
	// places are the places held for refused requests' retries, by
	// tenant (see promise), nHeld and heldCost their number and cost;
	// nil until a tenant marks a retry.
	places   map[string]*heldPlaces
	nHeld    int
	heldCost int64
}

// shareGroup is the state of one share of a queue: a start-time fair
// queue over the groups, by cost admitted over percent.
type shareGroup struct {
	weight float64 // the percent; 0 is served only when no weighted group waits
	vt     float64 // cost admitted over weight: the lowest goes next
	n      int     // waiters
}

type prioClass struct {
	prio    int
	group   int // the share group, when the queue has shares
	tenants map[string]*tenantQueue
	ring    []*tenantQueue
	next    int
}

type tenantQueue struct {
	tenant string
	ws     []*waiter
}

const (
	waiting = iota
	granted
	timedOut
	canceled
)

type waiter struct {
	h *held // valid only while the waiter is queued
	// yielded are the concurrency permits of the policies decided before
	// this one that the request gave back to wait: dispatch takes them
	// again with this policy's, all or none. Valid while queued, as h.
	yielded []*held
	retaken []backend.Grant // dispatch's attempt at yielded's grants
	set     *PolicySet      // the configuration the request was decided under
	key     string
	sh      *qshard
	tenant  string
	cost    int64 // the request's estimate under the policy
	prio    int
	order   limits.Order
	state   int
	grant   backend.Grant
	lim     *limits.Limit // the limit the grant was taken under
	done    chan struct{}
	queued  time.Time
}

func newQueueSet(c *Controller, st *policyState) *queueSet {
	qs := &queueSet{c: c, st: st, seed: maphash.MakeSeed()}
	for i := range qs.shards {
		qs.shards[i].m = make(map[string]*queue)
	}
	if w, ok := st.limiter.(backend.Waker); ok {
		w.OnWake(qs.wake)
	}
	return qs
}

// wake serves the queue of key now, if it has waiters: its limiter says
// the partition may have gained room (backend.Waker).
func (qs *queueSet) wake(key string) {
	sh := qs.shard(key)
	sh.mu.Lock()
	q := sh.m[key]
	waiting := q != nil && q.n > 0
	sh.mu.Unlock()
	if waiting {
		qs.dispatch(key)
	}
}

func (qs *queueSet) shard(key string) *qshard {
	return &qs.shards[maphash.String(qs.seed, key)%uint64(len(qs.shards))]
}

// acquire evaluates an enforcing queued policy: it admits at once when the
// partition's queue is empty and the permits fit, and otherwise waits (when
// wait is set) behind the queued requests.
func (qs *queueSet) acquire(ctx context.Context, t *ticket, h *held, wait bool, now time.Time) error {
	c := qs.c
	sh := qs.shard(h.key)
	sh.mu.Lock()
	q := sh.m[h.key]
	if q == nil || q.n == 0 {
		if err := qs.st.limiter.Acquire(ctx, h.key, h.lim, h.est, now, &h.grant); err != nil {
			sh.mu.Unlock()
			return c.storeFailed(ctx, t, h, err, now)
		}
		g := h.grant
		if g.OK || !wait || g.Full || g.RetryAfter == limits.Never || qs.hopeless(ctx, h, g, now) {
			if g.OK {
				qs.hold(sh, h.key, t.priority, h, h.lim, &g, now)
			}
			sh.mu.Unlock()
			return c.decide(t, h)
		}
	} else {
		// Others are waiting: the request's figures are the queue's (its
		// grant, from the ticket's last use, is another request's). One
		// that will not wait is refused, not let past them. It may retry
		// when the queue is next served.
		h.grant = backend.Grant{Limit: h.lim.Capacity()}
		if q.timer != nil && h.p.Algorithm != limits.Concurrency {
			h.grant.RetryAfter = time.Duration(max(1, q.timerAt-now.UnixNano()))
		}
		if !wait {
			sh.mu.Unlock()
			return c.decide(t, h)
		}
	}
	if q != nil && q.refuses(h.p, t.tenant, t.retry, now.UnixNano()) {
		held := false
		if hint := q.fullHint(h, t.tenant, now.UnixNano()); hint > 0 {
			h.grant.RetryAfter = hint
			held = q.promise(h.p, t.tenant, h.est, hint, now.UnixNano())
		}
		sh.mu.Unlock()
		retry := h.retryAfter()
		c.report(t, h, Rejected, ReasonQueueFull, retry)
		return &Rejection{Policy: h.p.Name, Reason: ReasonQueueFull, RetryAfter: retry, Status: h.status(), Held: held}
	}
	if q == nil {
		q = newQueue(strings.Clone(h.key), h.p.Queue.Shares)
		if q.groups != nil && h.p.Algorithm == limits.Concurrency {
			q.slots = sh.slotLoad(q.key, true)
		}
		sh.m[q.key] = q
	}
	// A waiting request holds no slot: the concurrency permits earlier
	// policies gave it go back now, and are taken again when it is served.
	// (The shard locks of earlier policies, which giving back may take,
	// always come after a later policy's: no lock order cycle.)
	yielded := c.yield(t, h, now)
	w := &waiter{h: h, yielded: yielded, set: t.cfg, key: q.key, sh: sh, tenant: t.tenant, cost: h.est, order: h.p.Queue.Order, done: make(chan struct{}), queued: now}
	w.prio = t.priority
	q.push(w)
	if q.n == 1 {
		qs.arm(q, h, h.grant, now)
	}
	// The queue timeout runs from the moment the waiter joins the queue,
	// before anyone can see it there (Stats, the Queued decision): a wait
	// is never longer than the timeout by however long this goroutine is
	// descheduled, and a fake clock moved once the waiter shows counts.
	var timer Timer
	if d := h.p.Queue.Timeout; d > 0 {
		timer = c.clock.AfterFunc(d, func() { qs.remove(w, timedOut) })
	}
	sh.mu.Unlock()
	c.report(t, h, Queued, h.p.reason(&h.grant), h.retryAfter())

	select {
	case <-w.done:
	case <-ctx.Done():
		qs.remove(w, canceled)
	}
	if timer != nil {
		timer.Stop()
	}
	sh.mu.Lock()
	state, g, lim := w.state, w.grant, w.lim
	sh.mu.Unlock()
	h.wait = c.clock.Now().Sub(now)
	switch state {
	case granted:
		for _, o := range yielded {
			// Every enforcing one was taken again (a shadow one may
			// report that it would reject).
			_ = c.decide(t, o)
		}
		h.grant, h.lim = g, lim
		return c.decide(t, h)
	case timedOut:
		retry := h.retryAfter()
		c.report(t, h, Timeout, ReasonQueueTimeout, retry)
		return &Rejection{Policy: h.p.Name, Reason: ReasonQueueTimeout, RetryAfter: retry, Status: h.status()}
	default:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			retry := h.retryAfter()
			c.report(t, h, Timeout, ReasonQueueTimeout, retry)
			return &Rejection{Policy: h.p.Name, Reason: ReasonQueueTimeout, RetryAfter: retry, Status: h.status()}
		}
		c.report(t, h, Canceled, ReasonNone, 0)
		return ctx.Err()
	}
}

// hopeless reports whether a rate refusal cannot be cured within the
// queue's timeout or the caller's deadline: such a request is refused at
// once rather than queued to time out.
func (qs *queueSet) hopeless(ctx context.Context, h *held, g backend.Grant, now time.Time) bool {
	if h.p.Algorithm == limits.Concurrency {
		return false
	}
	if d := h.p.Queue.Timeout; d > 0 && g.RetryAfter > d {
		return true
	}
	if dl, ok := ctx.Deadline(); ok && now.Add(g.RetryAfter).After(dl) {
		return true
	}
	return false
}

// arm schedules the next dispatch attempt for q's head, whose last refusal
// was g. Callers hold the shard lock.
func (qs *queueSet) arm(q *queue, h *held, g backend.Grant, now time.Time) {
	d := pollInterval
	if h.p.Algorithm != limits.Concurrency && g.RetryAfter > 0 {
		d = g.RetryAfter
	}
	at := now.Add(d).UnixNano()
	if q.timer != nil {
		if q.timerAt <= at {
			return
		}
		q.timer.Stop()
	}
	key := q.key
	q.timerAt = at
	q.timer = qs.c.clock.AfterFunc(d, func() { qs.dispatch(key) })
}

// dispatch admits waiters of a partition while their permits fit.
func (qs *queueSet) dispatch(key string) {
	sh := qs.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.m[key]
	if q == nil {
		return
	}
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	for q.n > 0 {
		w := q.peek()
		now := qs.c.clock.Now()
		// Served under the limit installed now (a reload since it queued
		// applies to it); its caller takes it with the grant.
		lim := qs.c.limitNow(w.set, w.h, w.tenant)
		var g backend.Grant
		err := qs.st.limiter.Acquire(context.Background(), q.key, lim, w.h.est, now, &g)
		if err != nil || !g.OK {
			if g.Expired > 0 {
				qs.c.obs.LeaseExpired(w.h.p.Name, int(g.Expired))
				g.Expired = 0
			}
			qs.arm(q, w.h, g, now)
			return
		}
		if !qs.retake(w, now) {
			// Its earlier policies have no room now: it keeps its place,
			// and this policy's permits go back until the next attempt.
			qs.giveBack(w.h, lim, &g, now)
			qs.arm(q, w.h, backend.Grant{}, now)
			return
		}
		q.charge(w.prio, w.h.est)
		qs.hold(sh, q.key, w.prio, w.h, lim, &g, now)
		w.h.renewed = now // its lease starts now, not when it queued
		q.pop(w)
		w.grant, w.lim, w.state = g, lim, granted
		close(w.done)
	}
	qs.emptied(sh, q)
}

// emptied drops q, whose last waiter has left, from its shard, or, while
// it holds places for retries, keeps it until the last one's grace ends.
// Callers hold the shard lock.
func (qs *queueSet) emptied(sh *qshard, q *queue) {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	now := qs.c.clock.Now().UnixNano()
	last := q.lastHeld(now)
	if last == 0 {
		delete(sh.m, q.key)
		return
	}
	key := q.key
	q.timerAt = last + 1
	q.timer = qs.c.clock.AfterFunc(time.Duration(q.timerAt-now), func() { qs.dispatch(key) })
}

// yield gives back the concurrency permits t holds from the policies
// evaluated before h, for a request about to wait in h's queue, and
// returns their ops, for dispatch to take again. Rate charges stay: they
// count work that will run, and are refunded if it never does.
func (c *Controller) yield(t *ticket, h *held, now time.Time) []*held {
	var out []*held
	for i := range t.ops {
		o := &t.ops[i]
		if o == h {
			break
		}
		if o.taken && o.p.Algorithm == limits.Concurrency {
			o.taken = false
			c.settleOne(o, 0, now, true)
			out = append(out, o)
		}
	}
	return out
}

// retake takes again the concurrency permits w gave back when it queued,
// for w about to be served: all the enforcing ones, or none (a shadow one
// that does not fit is left to report that it would reject). The ops'
// grants change only when it succeeds, so a waiter never served reports
// what its earlier policies first decided. Callers hold the lock of w's
// shard; the locks retake takes are earlier policies'.
func (qs *queueSet) retake(w *waiter, now time.Time) bool {
	c := qs.c
	if w.retaken == nil {
		w.retaken = make([]backend.Grant, len(w.yielded))
	}
	for i, o := range w.yielded {
		g := &w.retaken[i]
		o.lim = c.limitNow(w.set, o, w.tenant)
		err := o.limiterOf().Acquire(context.Background(), o.key, o.lim, o.est, now, g)
		c.settleFailed(o, err)
		if g.Expired > 0 {
			c.obs.LeaseExpired(o.p.Name, int(g.Expired))
			g.Expired = 0
		}
		if err == nil && (g.OK || o.mode == limits.Shadow) {
			continue
		}
		for j, b := range w.yielded[:i] {
			if w.retaken[j].OK {
				first := b.grant
				b.grant = w.retaken[j]
				c.settleOne(b, 0, now, true)
				b.grant = first
			}
		}
		return false
	}
	for i, o := range w.yielded {
		o.grant = w.retaken[i]
		o.renewed = now // taken again now: its lease starts now
		if o.grant.OK && o.p.queues != nil && !o.local {
			osh := o.p.queues.shard(o.key)
			osh.mu.Lock()
			o.p.queues.hold(osh, o.key, w.prio, o, o.lim, &o.grant, now)
			osh.mu.Unlock()
		}
	}
	return true
}

// giveBack returns the permits g took under lim from h's policy for a
// waiter that is not served after all. Callers hold the lock of the
// queue's shard, so the queue is not served from here.
func (qs *queueSet) giveBack(h *held, lim *limits.Limit, g *backend.Grant, now time.Time) {
	ctx := context.Background()
	if h.p.Algorithm == limits.Concurrency {
		qs.c.settleFailed(h, qs.st.limiter.Release(ctx, h.key, lim, g, now))
	} else if g.Taken != 0 {
		qs.c.settleFailed(h, qs.st.limiter.Adjust(ctx, h.key, lim, g, -g.Taken, now))
	}
}

// remove takes w out of its queue unless it was already served. It may run
// from a timer after the waiter has returned, so it reads only the waiter's
// own fields, never its held (which the ticket reuses).
func (qs *queueSet) remove(w *waiter, state int) {
	sh := w.sh
	sh.mu.Lock()
	if w.state != waiting {
		sh.mu.Unlock()
		return
	}
	q := sh.m[w.key]
	head := q.peek() == w
	q.pop(w)
	w.state = state
	close(w.done)
	if q.n == 0 {
		qs.emptied(sh, q)
		head = false
	}
	sh.mu.Unlock()
	if head {
		// A smaller request behind may fit now.
		qs.dispatch(w.key)
	}
}

// newQueue returns the queue of a partition, with the policy's shares.
func newQueue(key string, shares []limits.Share) *queue {
	q := &queue{key: key}
	if len(shares) > 0 {
		q.shares = shares
		q.groups = make([]shareGroup, len(shares)+1)
		rest := 100
		for i, s := range shares {
			q.groups[i].weight = float64(s.Percent)
			rest -= s.Percent
		}
		q.groups[len(shares)].weight = float64(rest)
	}
	return q
}

// groupOf returns the share group of priority prio.
func (q *queue) groupOf(prio int) int {
	for i, s := range q.shares {
		if s.Priority == prio {
			return i
		}
	}
	return len(q.shares)
}

// charge counts cost admitted for a waiter of priority prio against its
// share group.
func (q *queue) charge(prio int, cost int64) {
	if q.groups == nil {
		return
	}
	if g := &q.groups[q.groupOf(prio)]; g.weight > 0 {
		q.virtual = g.vt
		g.vt += float64(max(cost, 1)) / g.weight
	}
}

// slotLoad returns the in-flight load of a partition, created when create
// is set and there is room. Callers hold the shard lock.
func (sh *qshard) slotLoad(key string, create bool) *slotLoad {
	if l := sh.slots[key]; l != nil || !create || len(sh.slots) >= maxSlotLoads {
		return l
	}
	if sh.slots == nil {
		sh.slots = map[string]*slotLoad{}
	}
	l := &slotLoad{byPrio: map[int]int64{}, leases: map[int64]lease{}}
	sh.slots[strings.Clone(key)] = l
	return l
}

// hold records the concurrency grant g, taken under lim by a request of
// priority prio, in its partition's load when its policy reserves shares.
// Callers hold the shard lock.
func (qs *queueSet) hold(sh *qshard, key string, prio int, h *held, lim *limits.Limit, g *backend.Grant, now time.Time) {
	if h.p.Algorithm != limits.Concurrency || len(h.p.Queue.Shares) == 0 || g.Stamp == 0 {
		return
	}
	l := sh.slotLoad(key, true)
	if l == nil {
		return
	}
	ns := now.UnixNano()
	if len(l.leases) >= max(64, 2*l.swept) {
		// Leases never settled are reclaimed by the store after MaxHold:
		// forget them too, once the table has doubled.
		for id, ls := range l.leases {
			if ls.expires <= ns {
				l.drop(id, ls)
			}
		}
		l.swept = len(l.leases)
	}
	l.leases[g.Stamp] = lease{prio: prio, cost: h.est, expires: ns + int64(lim.MaxHold)}
	l.byPrio[prio] += h.est
}

func (l *slotLoad) drop(id int64, ls lease) {
	delete(l.leases, id)
	if l.byPrio[ls.prio] -= ls.cost; l.byPrio[ls.prio] <= 0 {
		delete(l.byPrio, ls.prio)
	}
}

// released forgets the concurrency grant of h, about to be released.
func (qs *queueSet) released(h *held) {
	sh := qs.shard(h.key)
	sh.mu.Lock()
	if l := sh.slotLoad(h.key, false); l != nil {
		if ls, ok := l.leases[h.grant.Stamp]; ok {
			l.drop(h.grant.Stamp, ls)
		}
		if len(l.leases) == 0 && sh.m[h.key] == nil {
			delete(sh.slots, h.key)
		}
	}
	sh.mu.Unlock()
}

func (q *queue) push(w *waiter) {
	i, found := slices.BinarySearchFunc(q.classes, w.prio, func(c *prioClass, p int) int { return p - c.prio })
	if !found {
		pc := &prioClass{prio: w.prio, tenants: map[string]*tenantQueue{}}
		if q.groups != nil {
			pc.group = q.groupOf(w.prio)
		}
		q.classes = slices.Insert(q.classes, i, pc)
	}
	pc := q.classes[i]
	if q.groups != nil {
		g := &q.groups[pc.group]
		if g.n == 0 {
			// A group that starts waiting again starts no earlier than
			// the last group served: what it did not use while idle
			// was borrowed by the others, not banked.
			g.vt = max(g.vt, q.virtual)
		}
		g.n++
	}
	tq := pc.tenants[w.tenant]
	if tq == nil {
		tq = &tenantQueue{tenant: w.tenant}
		pc.tenants[w.tenant] = tq
		pc.ring = append(pc.ring, tq)
	}
	tq.ws = append(tq.ws, w)
	q.n++
	q.cost += w.cost
}

// fullHint returns the retry hint of h, a request of tenant refused
// because the queue q of a rate policy is full (or the tenant's part of
// it, Queue.PerTenant): the time the policy's rate takes to serve the
// waiters ahead of it and the retries places are held for (the tenant's,
// one turn in the round robin of the tenants waiting, when its own part
// is what is full), after which a retry finds room rather than the same
// full queue (and finds it held, see promise). It returns 0 for a
// concurrency policy, or a limit without a rate: their own hint applies.
func (q *queue) fullHint(h *held, tenant string, now int64) time.Duration {
	if !h.p.Algorithm.IsRate() || h.lim.Per <= 0 || h.lim.Amount <= 0 {
		return 0
	}
	ahead := q.cost + q.heldCost
	if q.n < h.p.Queue.Size {
		// The tenant's part is full: its waiters, and the retries its
		// places are held for, are served once a turn (the waiters at
		// most after all the others waiting now; the retries, still to
		// come, in turns with whatever the others send by then).
		var own int64
		tenants, waiting := 0, false
		for _, pc := range q.classes {
			tenants += len(pc.ring)
			if tq := pc.tenants[tenant]; tq != nil {
				waiting = true
				for _, w := range tq.ws {
					own += w.cost
				}
			}
		}
		// The tenants whose retries have places are waiting too, in
		// effect: counting only those in the queue now would give the
		// tenant that has waiters at this instant shorter hints than
		// the one whose retries are on their way, and more turns.
		for other, pl := range q.places {
			if len(pl.ps) > 0 && !q.waiting(other) {
				tenants++
				if other == tenant {
					waiting = true
				}
			}
		}
		if !waiting {
			tenants++
		}
		ahead = min(q.cost, own*int64(tenants))
		if pl := q.places[tenant]; pl != nil && len(pl.ps) > 0 {
			// And no sooner than a turn after the tenant's last place.
			ahead += pl.cost * int64(tenants)
			hint := limits.CeilDuration(float64(ahead) * float64(h.lim.Per) / float64(h.lim.Amount))
			turn := limits.CeilDuration(float64(h.est*int64(tenants)) * float64(h.lim.Per) / float64(h.lim.Amount))
			return max(hint, time.Duration(pl.ps[len(pl.ps)-1].due-now)+turn)
		}
	}
	return limits.CeilDuration(float64(ahead) * float64(h.lim.Per) / float64(h.lim.Amount))
}

// waiting reports whether tenant has a waiter in q.
func (q *queue) waiting(tenant string) bool {
	for _, pc := range q.classes {
		if pc.tenants[tenant] != nil {
			return true
		}
	}
	return false
}

// waitersOf returns how many of q's waiters are the tenant's.
func (q *queue) waitersOf(tenant string) int {
	n := 0
	for _, pc := range q.classes {
		if tq := pc.tenants[tenant]; tq != nil {
			n += len(tq.ws)
		}
	}
	return n
}

// peek returns the waiter to serve next.
func (q *queue) peek() *waiter {
	var best *prioClass
	var inflight [limits.MaxShares + 1]int64
	if q.slots != nil {
		for prio, cost := range q.slots.byPrio {
			inflight[q.groupOf(prio)] += cost
		}
	}
	for _, pc := range q.classes {
		if len(pc.ring) == 0 {
			continue
		}
		if q.groups == nil {
			best = pc
			break
		}
		// Classes are by priority, highest first: the first seen of a
		// group is the group's next.
		if best == nil || q.before(pc.group, best.group, &inflight) {
			best = pc
		}
	}
	if best == nil {
		return nil
	}
	tq := best.ring[best.next%len(best.ring)]
	if tq.ws[0].order == limits.NewestFirst {
		return tq.ws[len(tq.ws)-1]
	}
	return tq.ws[0]
}

// before reports whether share group a goes before b: a weighted group
// before one without weight, then the one holding least in flight for
// its share (a concurrency partition's), then the least served for its
// share.
func (q *queue) before(a, b int, inflight *[limits.MaxShares + 1]int64) bool {
	ga, gb := &q.groups[a], &q.groups[b]
	if (ga.weight > 0) != (gb.weight > 0) {
		return ga.weight > 0
	}
	if q.slots != nil && ga.weight > 0 {
		if la, lb := float64(inflight[a])/ga.weight, float64(inflight[b])/gb.weight; la != lb {
			return la < lb
		}
	}
	return ga.vt < gb.vt
}

// pop removes w; when w was the next to serve, the round robin moves on.
func (q *queue) pop(w *waiter) {
	for ci, pc := range q.classes {
		if pc.prio != w.prio {
			continue
		}
		tq := pc.tenants[w.tenant]
		i := slices.Index(tq.ws, w)
		tq.ws = slices.Delete(tq.ws, i, i+1)
		q.n--
		q.cost -= w.cost
		if q.groups != nil {
			q.groups[pc.group].n--
		}
		ri := slices.Index(pc.ring, tq)
		served := ri == pc.next%len(pc.ring)
		if len(tq.ws) == 0 {
			delete(pc.tenants, w.tenant)
			pc.ring = slices.Delete(pc.ring, ri, ri+1)
			if ri < pc.next%max(1, len(pc.ring)+1) && !served {
				pc.next--
			}
			if len(pc.ring) == 0 {
				q.classes = slices.Delete(q.classes, ci, ci+1)
			} else {
				pc.next %= len(pc.ring)
			}
		} else if served {
			pc.next = (ri + 1) % len(pc.ring)
		}
		return
	}
}

// depth returns the number of waiters, and of places held for retries
// at now (read, not pruned: Stats changes nothing).
func (qs *queueSet) depth(now int64) (n, held int) {
	for i := range qs.shards {
		sh := &qs.shards[i]
		sh.mu.Lock()
		for _, q := range sh.m {
			n += q.n
			for _, pl := range q.places {
				for _, pr := range pl.ps {
					if pr.until >= now {
						held++
					}
				}
			}
		}
		sh.mu.Unlock()
	}
	return n, held
}
