package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAdmitAllSameAsMemory decides random groups of requests
// (Controller.TryAdmitAll) through two controllers, one on the in-memory
// store (one member after another, what a refusal took given back) and
// one on Redis (one batch, which takes nothing when a member is refused;
// members counting twice in one partition fall back to one after
// another), and requires the same answers: each member's refusal or
// admission and every figure, and the partitions left the same for the
// next group. Refill rates that are powers of two per nanosecond keep
// every bucket level exact, so that taking nothing and giving back what
// was taken leave one level.
func TestAdmitAllSameAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	per := time.Duration(1 << 30)
	tenant := []limits.KeyPart{limits.KeyTenant}
	chat, batch := limits.Match{Operations: []string{"chat"}}, limits.Match{Operations: []string{"batch"}}
	all := []admission.Policy{
		{Name: "rpm", Key: tenant, Algorithm: limits.TokenBucket, Limit: 8, Per: per},
		{Name: "tpm", Key: tenant, Match: chat, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 64, Per: per, Burst: 96},
		{Name: "fw", Key: tenant, Match: batch, Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 150, Per: 2 * time.Second},
		{Name: "inflight", Key: tenant, Match: batch, Algorithm: limits.Concurrency, Limit: 3, MaxHold: time.Minute},
		{Name: "shadow", Key: tenant, Match: chat, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 32, Per: per, Mode: limits.Shadow},
	}
	clock := admissiontest.NewClock(backendtest.Epoch)
	mem, red := twins(t, client, clock, all)
	// answer describes a group's answer. When two members share a
	// partition and the group is refused, only that is compared: in
	// memory a member refused by one policy holds what its others took
	// until the group's rollback, in a Redis batch it takes nothing, so
	// the members after it may be refused by other policies, or not.
	answer := func(ms []admission.Member, err error, shared bool) string {
		if shared && err != nil {
			return fmt.Sprintf("refused, invalid cost %v", errors.Is(err, admission.ErrInvalidCost))
		}
		var b strings.Builder
		fmt.Fprintf(&b, "err=%v\n", err)
		for i, m := range ms {
			var rej *admission.Rejection
			switch {
			case errors.As(m.Err, &rej):
				fmt.Fprintf(&b, " %d: refused by %s (%v) retry=%v", i, rej.Policy, rej.Reason, rej.RetryAfter)
			case m.Err != nil:
				fmt.Fprintf(&b, " %d: %v", i, m.Err)
			case m.Ticket.Valid():
				fmt.Fprintf(&b, " %d: admitted %+v would reject %v", i, m.Ticket.Statuses(nil), m.Ticket.WouldReject(nil))
			default:
				fmt.Fprintf(&b, " %d: let through, rolled back", i)
			}
			fmt.Fprintf(&b, " status %+v\n", m.Status)
		}
		return b.String()
	}
	rng := rand.New(rand.NewPCG(32, 1))
	ctx := context.Background()
	type pair struct{ m, r admission.Ticket }
	var open []pair
	outcomes := map[string]int{}
	for i := 0; i < 600; i++ {
		clock.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		for len(open) > 0 && rng.IntN(2) == 0 {
			j := rng.IntN(len(open))
			u := admission.Usage{Tokens: rng.Int64N(80), TokensKnown: true}
			open[j].m.Settle(u)
			open[j].r.Settle(u)
			open = append(open[:j], open[j+1:]...)
		}
		group := make([]admission.Member, 1+rng.IntN(4))
		shared := false
		for k := range group {
			group[k].Request = admission.Request{
				Tenant:    []string{"acme", "initech", "hooli"}[rng.IntN(3)],
				Operation: []string{"chat", "batch"}[rng.IntN(2)],
				Tokens:    rng.Int64N(60),
			}
			if rng.IntN(40) == 0 {
				group[k].Request.Tokens = -1
			}
			for _, o := range group[:k] {
				shared = shared || o.Request.Tenant == group[k].Request.Tenant
			}
		}
		onMem := slices.Clone(group)
		em := mem.TryAdmitAll(ctx, onMem)
		er := red.TryAdmitAll(ctx, group)
		am, ar := answer(onMem, em, shared), answer(group, er, shared)
		if am != ar {
			t.Fatalf("group %d at %v:\n redis  %s memory %s", i, clock.Now().Sub(backendtest.Epoch), ar, am)
		}
		switch {
		case em == nil:
			outcomes["admitted"]++
			for k := range group {
				open = append(open, pair{onMem[k].Ticket, group[k].Ticket})
			}
		case errors.Is(em, admission.ErrInvalidCost):
			outcomes["invalid"]++
		default:
			outcomes["refused"]++
		}
	}
	for _, p := range open {
		p.m.Done()
		p.r.Done()
	}
	if outcomes["admitted"] == 0 || outcomes["refused"] == 0 || outcomes["invalid"] == 0 {
		t.Fatalf("outcomes %v: the groups do not exercise the limits", outcomes)
	}
}
