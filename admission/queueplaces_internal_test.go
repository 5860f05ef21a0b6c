package admission

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// TestHeldTenantsBounded: a queue holds places for at most
// maxHeldTenants tenants, so a refusal (which visits them all) costs at
// most that many steps however many tenants mark their retries; a tenant
// without places and without a marked retry for maxHeldWait is forgotten,
// so tenants that came once do not keep the room from the next ones.
func TestHeldTenantsBounded(t *testing.T) {
	p := &policy{Policy: Policy{Name: "tpm", Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute,
		Queue: limits.Queue{Size: 4, PerTenant: 2, Timeout: time.Hour}}}
	q := newQueue("k", nil)
	now := int64(time.Hour)
	for i := range 100 {
		q.refuses(p, "t"+strconv.Itoa(i), true, now)
	}
	if n := len(q.places); n != maxHeldTenants(p) {
		t.Fatalf("%d tenants with places; want %d", n, maxHeldTenants(p))
	}
	if q.refuses(p, "late", true, now); q.places["late"] != nil || q.promise(p, "late", 1, time.Second, now) {
		t.Fatal("a tenant beyond the bound was given a place")
	}
	// t0 is promised a place at 59 s: it is kept while the place is; the
	// others, with none, are forgotten after maxHeldWait.
	if !q.promise(p, "t0", 1, 59*time.Second, now) {
		t.Fatal("t0 was not given a place")
	}
	now += int64(maxHeldWait) + 1
	q.refuses(p, "late", true, now)
	if q.places["t0"] == nil || q.places["t1"] != nil || q.places["late"] == nil || len(q.places) != 2 {
		t.Fatalf("tenants kept after a minute: %v; want t0 (its place held until 61 s) and late", keys(q.places))
	}
	if !q.promise(p, "late", 1, time.Second, now) {
		t.Error("late was not given a place once there was room")
	}
	// Seen again by its retries, a tenant is kept.
	for range 3 {
		now += int64(maxHeldWait) / 2
		q.refuses(p, "late", true, now)
	}
	if q.places["late"] == nil || q.places["t0"] != nil {
		t.Errorf("tenants kept: %v; want late only", keys(q.places))
	}
}

func keys(m map[string]*heldPlaces) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestHeldPlacesShared: one tenant may take every place while it is the
// only one holding places, and no more than its equal share of them once
// others are: the places it holds beyond stay until their time, new ones
// go to the others.
func TestHeldPlacesShared(t *testing.T) {
	p := &policy{Policy: Policy{Name: "tpm", Algorithm: limits.TokenBucket, Limit: 600, Per: time.Minute,
		Queue: limits.Queue{Size: 4, PerTenant: 2, Timeout: time.Hour}}}
	q := newQueue("k", nil)
	now := int64(time.Hour)
	// promised refuses a request of tenant (a marked retry, or a new
	// request) n times at now, and returns how many places it held.
	promised := func(tenant string, n int, retry bool) int {
		got := 0
		for i := range n {
			q.refuses(p, tenant, retry, now)
			if q.promise(p, tenant, 1, time.Duration(i+1)*time.Millisecond, now) {
				got++
			}
		}
		return got
	}
	all := maxHeld(p)
	if got := promised("a", all+10, true); got != all {
		t.Fatalf("a alone was promised %d places; want all %d", got, all)
	}
	if got := promised("b", 1, true); got != 0 {
		t.Fatalf("b was promised %d places with every place held; want 0", got)
	}
	// The half of a's places due first is given up: b may take half, a
	// none.
	now += int64(time.Duration(all/2)*time.Millisecond+heldGrace) + 1
	if got := promised("a", 10, false); got != 0 || len(q.places["a"].ps) != all/2 {
		t.Errorf("a, holding %d places, its share, was promised %d more", len(q.places["a"].ps), got)
	}
	if got := promised("b", all, false); got != all/2 {
		t.Errorf("b was promised %d places; want its share, %d", got, all/2)
	}
	if q.nHeld != all {
		t.Errorf("%d places held; want %d", q.nHeld, all)
	}
}
