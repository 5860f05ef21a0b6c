package admission

import (
	"cmp"
	"slices"
	"time"
)

// Places held for retries.
//
// A request refused because a rate policy's queue is full is told when
// the waiters ahead of it will have been served (queue.fullHint). Without
// more, the room its retry was promised goes to whoever comes first: a
// tenant sending more than its share fills its part of the queue again
// with new requests long before its retry comes back, so the hint is
// true of the queue and false for the retry, which is refused again. So
// once a tenant's clients show that they mark their retries
// (Request.Retry: an SDK's retry-count header), each of its refusals
// holds a place for its retry: new requests count the places held as
// taken, the next hints count the retries they wait for as waiters
// ahead, and the retry, coming back at its hint, takes its place ahead
// of the tenant's new requests. Places take at most all but one of the
// tenant's part, so a tenant whose retries are on their way still has a
// new request waiting at its turn. A retry that does not come back within
// heldGrace of its time gives its place up. Clients that never mark
// retries hold no place: nothing changes for them.
//
// Marking every request a retry gains a tenant nothing over others:
// places are held by tenant, so it can only take its own places sooner,
// and only once their time has come. A tenant that sends more than its
// share is told, truthfully, later and later hints; beyond maxHeldWait
// none is held, and the hint says as much. Places are held per replica:
// a retry that reaches another replica finds none there. A queue whose
// waiters have all been served keeps its places until their grace ends.
//
// A queue holds places for as many tenants as it has room for waiters
// (maxHeldTenants), first come; a tenant that has no place left and has
// sent no marked retry for maxHeldWait is forgotten, making room for the
// next. So tenants that mark their retries once (or an identity minted
// per request, where the tenant is a client's address) cannot keep the
// room from the tenants that come after, and a refusal, which visits
// every tenant with places, costs at most queue.size steps. A tenant holds
// at most an equal share of the places (maxHeld) among the tenants the
// queue holds places for: alone it may take them all.

// maxHeldWait is the furthest hint a place is held for: clients wait
// about a minute on a hint at most (OpenAI's SDKs back off on their own
// instead), so a place held later would wait for a retry that has come
// and gone.
const maxHeldWait = time.Minute

// heldGrace is how long a held place waits for its retry past the hint.
const heldGrace = 2 * time.Second

// heldPlaces are the places a queue holds for one tenant's retries.
type heldPlaces struct {
	ps   []promise // by due
	cost int64     // the requests' estimates, summed
	// seen is when the tenant last sent a marked retry or was promised a
	// place (unix nanoseconds): an entry without places is forgotten
	// maxHeldWait after, so tenants that came once do not keep the
	// queue's room for tenants (maxHeldTenants) taken.
	seen int64
}

// promise is a place held for the retry of a refused request.
type promise struct {
	due, until int64 // unix nanoseconds: from its hint, for heldGrace
	cost       int64 // the refused request's estimate
}

// maxHeld bounds the places a queue of p holds: sixteen times its size.
// (The hint's bound, maxHeldWait, is usually the one reached first.)
func maxHeld(p *policy) int { return 16 * p.Queue.Size }

// maxHeldTenants bounds the tenants a queue of p holds places for: as
// many as it has room for waiters. Every refusal visits them (to give up
// the places whose retry did not come), so the bound is also what one
// refusal costs at most.
func maxHeldTenants(p *policy) int { return p.Queue.Size }

// refuses reports whether q, of policy p, refuses a request of tenant
// at now for want of room: when its waiters fill the queue or the
// tenant's part of it (Queue.PerTenant, else the whole queue), or,
// unless the request is a retry taking a place held for it, when the
// tenant's waiters and places fill its part. A retry takes the tenant's
// earliest place whose time has come. Places take at most all but one of
// the part: a tenant whose retries are on their way still has a new
// request waiting when its turn comes, rather than losing the turn to
// the others. Places count against their tenant's part only: they never
// refuse another tenant's request. From a tenant's first retry on, q
// holds places for its refused requests (see promise), until it is
// forgotten.
func (q *queue) refuses(p *policy, tenant string, retry bool, now int64) bool {
	for t, pl := range q.places {
		q.expire(pl, now)
		if len(pl.ps) == 0 && pl.seen+int64(maxHeldWait) < now {
			delete(q.places, t)
		}
	}
	part := partOf(p)
	pl := q.places[tenant]
	if retry && pl == nil && part > 1 && len(q.places) < maxHeldTenants(p) {
		if q.places == nil {
			q.places = map[string]*heldPlaces{}
		}
		pl = &heldPlaces{}
		q.places[tenant] = pl
	}
	if retry && pl != nil {
		pl.seen = now
	}
	w := q.waitersOf(tenant)
	switch {
	case q.n >= p.Queue.Size || w >= part:
		return true
	case retry && pl != nil && len(pl.ps) > 0 && pl.ps[0].due <= now:
		q.drop(pl, 1)
		return false
	case pl == nil:
		return false
	}
	return w+min(len(pl.ps), part-1) >= part
}

// partOf returns the most waiters one tenant may have in a queue of p:
// Queue.PerTenant, else the whole queue. A part of one holds no place:
// places take at most all but one of it.
func partOf(p *policy) int {
	if p.Queue.PerTenant > 0 {
		return p.Queue.PerTenant
	}
	return p.Queue.Size
}

// promise holds a place in q for the retry of tenant's request of cost,
// refused at now with hint, when tenant marks its retries, the hint is
// at most maxHeldWait, q holds fewer than maxHeld(p) places and the
// tenant fewer than its equal share of them among the tenants q holds
// places for (so one tenant's small requests cannot take every place from
// the others); it reports whether it did.
func (q *queue) promise(p *policy, tenant string, cost int64, hint time.Duration, now int64) bool {
	pl := q.places[tenant]
	if pl == nil || hint > maxHeldWait || q.nHeld >= maxHeld(p) || len(pl.ps) >= maxHeld(p)/len(q.places) {
		return false
	}
	due := now + int64(hint)
	i, _ := slices.BinarySearchFunc(pl.ps, due, func(o promise, d int64) int { return cmp.Compare(o.due, d) })
	pl.ps = slices.Insert(pl.ps, i, promise{due: due, until: due + int64(heldGrace), cost: cost})
	pl.seen = now
	pl.cost += cost
	q.nHeld++
	q.heldCost += cost
	return true
}

// expire gives up the places of pl whose retry did not come in time.
func (q *queue) expire(pl *heldPlaces, now int64) {
	n := 0
	for n < len(pl.ps) && pl.ps[n].until < now {
		n++
	}
	q.drop(pl, n)
}

// lastHeld expires q's places at now and returns the end of the last
// one's grace, 0 when none is left.
func (q *queue) lastHeld(now int64) int64 {
	var last int64
	for _, pl := range q.places {
		q.expire(pl, now)
		if n := len(pl.ps); n > 0 {
			last = max(last, pl.ps[n-1].until)
		}
	}
	return last
}

// drop removes the first n places of pl.
func (q *queue) drop(pl *heldPlaces, n int) {
	for _, pr := range pl.ps[:n] {
		pl.cost -= pr.cost
		q.heldCost -= pr.cost
	}
	q.nHeld -= n
	pl.ps = slices.Delete(pl.ps, 0, n)
}
