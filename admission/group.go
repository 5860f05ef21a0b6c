package admission

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// A Member is one request of a group decided together by
// Controller.TryAdmitAll, and its answer.
type Member struct {
	// Request is the request to decide.
	Request Request
	// Ticket is the request's ticket when the whole group was admitted;
	// the zero Ticket otherwise.
	Ticket Ticket
	// Err is the request's own refusal (a *Rejection) or failure; nil
	// when its policies let it through, whether or not another member's
	// refusal made the group give back what it took.
	Err error
	// Status holds the figures of the policy that refused the request or,
	// when none did, of its first policy (after any rollback); its Policy
	// is empty when no policy matched the request.
	Status Status
}

// TryAdmitAll decides the requests of ms as one: each as TryAdmit would
// (no request waits in a queue), and all admitted or none. When every
// member's policies let it through, each member gets its Ticket, to settle
// as any other. When one refuses, every member is still decided and gets
// its own answer (Err, Status), but nothing stays taken for any of them:
// the members whose policies let them through are reported as admitted
// and rolled back, as the policies of one request another policy refused.
//
// When every policy of every member lives on one store that evaluates
// batches (backend.Batcher), has no queue, and no two of them evaluate one
// partition, the whole group is decided in one store call (one round trip
// to a shared store), atomically: a refusal takes nothing anywhere.
// Otherwise the members are decided one after another and what they took
// is given back on a refusal.
//
// It returns nil when the group was admitted, else the first member's
// failure that is not a refusal (the caller's context ended, a store failed
// with a policy failing closed, an invalid amount), else the first
// refusal.
func (c *Controller) TryAdmitAll(ctx context.Context, ms []Member) error {
	now := c.clock.Now()
	cur := c.cfg.Load() // one snapshot for the whole group
	allShadow := c.allShadow.Load()
	var buf [8]*ticket
	ts := buf[:0]
	issued := true
	for i := range ms {
		m := &ms[i]
		m.Ticket, m.Err, m.Status = Ticket{}, nil, Status{}
		cfg, err := c.setOf(&m.Request, cur)
		if err == nil {
			err = m.Request.checkAmounts()
		}
		if err != nil {
			m.Err, issued = err, false
			ts = append(ts, nil)
			continue
		}
		t := c.issue(cfg, &m.Request, now)
		t.dec.Context = ctx
		t.match(cfg.policies, cfg.limitsFor(m.Request.Tenant), &m.Request, allShadow, now)
		ts = append(ts, t)
	}
	var evaluated [8]int
	counts := evaluated[:0]
	var b backend.Batcher
	if issued {
		b = c.groupBatcher(ts)
	}
	if b != nil {
		c.acquireGroup(ctx, b, ms, ts, now)
		for _, t := range ts {
			counts = append(counts, len(t.ops))
		}
	} else {
		for i, t := range ts {
			n := 0
			if t != nil {
				n, ms[i].Err = c.evaluate(ctx, t, 0, false, now)
			}
			counts = append(counts, n)
		}
	}
	var failed, refused error
	for i := range ms {
		switch err := ms[i].Err; err.(type) {
		case nil:
		case *Rejection:
			refused = cmpOr(refused, err)
		default:
			failed = cmpOr(failed, err)
		}
	}
	first := cmpOr(failed, refused)
	for i, t := range ts {
		if t != nil {
			ms[i].Ticket, _ = c.conclude(t, counts[i], ms[i].Err, first != nil, stageWhole, &ms[i].Status)
		}
	}
	return first
}

// cmpOr returns a if it is set, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// groupBatcher returns the Batcher that can decide every op of ts in one
// batch, or nil when none can: they need two or more ops, all on one
// Batcher store, none with a queue, and no two on one partition of one
// policy (a batch reads each partition once, before it takes from any).
func (c *Controller) groupBatcher(ts []*ticket) backend.Batcher {
	var b backend.Batcher
	var store string
	n := 0
	for _, t := range ts {
		for i := range t.ops {
			p := t.ops[i].p
			switch {
			case p.batcher == nil || p.Queue.Size > 0:
				return nil
			case b == nil:
				b, store = p.batcher, p.Store
			case p.batcher != b || p.Store != store:
				return nil
			}
			n++
		}
	}
	if n < 2 {
		return nil
	}
	for ti, t := range ts {
		for i := range t.ops {
			h := &t.ops[i]
			for _, u := range ts[ti:] {
				for j := range u.ops {
					if (u != t || j > i) && u.ops[j].p.limiter == h.p.limiter && u.ops[j].key == h.key {
						return nil
					}
				}
			}
		}
	}
	return b
}

// acquireGroup decides every op of ts in one batch on b, and sets each
// member's Err to its first refusal or failure.
func (c *Controller) acquireGroup(ctx context.Context, b backend.Batcher, ms []Member, ts []*ticket, now time.Time) {
	ops := ts[0].batch[:0]
	for _, t := range ts {
		for i := range t.ops {
			h := &t.ops[i]
			ops = append(ops, backend.Op{Limiter: h.p.limiter, Key: h.key, Limit: *h.lim, N: h.est, Shadow: h.mode == limits.Shadow})
		}
	}
	ts[0].batch = ops
	err := b.AcquireBatch(ctx, ops, now)
	j := 0
	for mi, t := range ts {
		for i := range t.ops {
			h := &t.ops[i]
			var e error
			if err != nil {
				e = c.storeFailed(ctx, t, h, err, now)
			} else {
				h.grant = ops[j].Grant
				e = c.decide(t, h)
			}
			ms[mi].Err = cmpOr(ms[mi].Err, e)
			j++
		}
	}
}
