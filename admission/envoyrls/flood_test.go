package envoyrls_test

import (
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestFloodOfValues: a caller sending distinct values of an entry limited
// per value, ten times as many as the partition table holds, fills it
// with its own partitions; a newcomer still gets a limit of its own,
// whole, and a caller active during the flood keeps its count.
func TestFloodOfValues(t *testing.T) {
	r := start(t, mustParse(t, `
domain: api
max_partitions: 1000
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000}
`), rigOption{})
	if got := r.call("api", hits(desc("user", "alice"), 900)).Statuses[0].LimitRemaining; got != 100 {
		t.Fatalf("alice's remaining after 900 = %d; want 100", got)
	}
	const flood = 10_000
	aliceHits := 900
	batch := make([]*rlv3.RateLimitDescriptor, 0, 64)
	for i := 0; i < flood; {
		batch = batch[:0]
		for ; len(batch) < cap(batch) && i < flood; i++ {
			batch = append(batch, desc("user", "flood-"+strconv.Itoa(i)))
		}
		if got := outcome(r.call("api", batch...)); got[:3] != "OK:" {
			t.Fatalf("flood call at value %d = %s; want OK (each value is under its own limit)", i, got)
		}
		r.clk.Advance(time.Millisecond)
		if i%(10*64) == 0 { // alice stays active
			r.call("api", desc("user", "alice"))
			aliceHits++
		}
	}
	for n := range 10 {
		resp := r.call("api", desc("user", "newcomer-"+strconv.Itoa(n)))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 999 {
			t.Fatalf("newcomer %d after a flood of %d values = %s, remaining %d; want OK with 999 of its own 1000",
				n, flood, outcome(resp), resp.Statuses[0].LimitRemaining)
		}
	}
	resp := r.call("api", desc("user", "alice"))
	if want := uint32(1000 - aliceHits - 1); resp.Statuses[0].LimitRemaining != want {
		t.Fatalf("alice's remaining after the flood = %d; want %d (her %d hits kept)", resp.Statuses[0].LimitRemaining, want, aliceHits)
	}
}
