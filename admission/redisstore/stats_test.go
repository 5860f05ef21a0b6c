package redisstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStatsCountPartitions: the partition figures of policies on Redis
// (admission_partitions, admission_partitions_near_limit) are the
// partitions in Redis, not 0: tenant a near its limit under a
// concurrency cap, a token bucket and a fixed window, tenants b and c
// well below. A second count waits for StatsEvery on the controller's
// clock; a count reads at most StatsKeys keys; a lease past its expiry
// is not near anything; and counting writes nothing (the keys and their
// contents are the same before and after).
func TestStatsCountPartitions(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	clock := admissiontest.NewClock(backendtest.Epoch)
	tenant := []limits.KeyPart{limits.KeyTenant}
	policies := []admission.Policy{
		{Name: "conc", Key: tenant, Algorithm: limits.Concurrency, Limit: 5, MaxHold: time.Minute, Store: "redis"},
		{Name: "tb", Key: tenant, Algorithm: limits.TokenBucket, Limit: 5, Per: 1000 * time.Hour, Store: "redis"},
		{Name: "fw", Key: tenant, Algorithm: limits.FixedWindow, Limit: 5, Per: time.Hour, Store: "redis"},
	}
	prefix := uniquePrefix()
	newCtl := func(keys int) *admission.Controller {
		st := newStore(t, client, redisstore.Config{Prefix: prefix, CallerTime: true, Timeout: 10 * time.Second, StatsEvery: 10 * time.Second, StatsKeys: keys})
		ctl, err := admission.New(admission.Config{Policies: policies}, admission.WithStore("redis", st), admission.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctl.Close() })
		return ctl
	}
	ctl := newCtl(0)
	ctx := context.Background()
	admit := func(tenant string, n int) {
		t.Helper()
		for range n {
			if _, err := ctl.TryAdmit(ctx, admission.Request{Tenant: tenant}); err != nil {
				t.Fatalf("TryAdmit(%s): %v", tenant, err)
			}
		}
	}
	admit("a", 4) // 4 of 5 under each: near the limit
	admit("b", 1)
	admit("c", 1)
	figures := func(c *admission.Controller) map[string][2]int {
		out := map[string][2]int{}
		for _, s := range c.Stats() {
			out[s.Name] = [2]int{s.Partitions, s.NearLimit}
		}
		return out
	}
	check := func(c *admission.Controller, what string, want map[string][2]int) {
		t.Helper()
		got := figures(c)
		for name, w := range want {
			if got[name] != w {
				t.Errorf("%s: Stats of %s (partitions, near limit) = %v; want %v", what, name, got[name], w)
			}
		}
	}
	before := dump(t, srv.Addr)
	check(ctl, "first count", map[string][2]int{"conc": {3, 1}, "tb": {3, 1}, "fw": {3, 1}})
	if after := dump(t, srv.Addr); after != before {
		t.Errorf("counting partitions changed Redis:\n%s\nthen\n%s", before, after)
	}

	admit("b", 3) // 4 of 5 too
	admit("d", 1)
	check(ctl, "within StatsEvery", map[string][2]int{"conc": {3, 1}, "tb": {3, 1}, "fw": {3, 1}})
	clock.Advance(10 * time.Second)
	check(ctl, "after StatsEvery", map[string][2]int{"conc": {4, 2}, "tb": {4, 2}, "fw": {4, 2}})

	// Another store on the same keys, reading at most 2 of them.
	bounded := figures(newCtl(2))
	for _, name := range []string{"conc", "tb", "fw"} {
		if got := bounded[name][0]; got != 2 {
			t.Errorf("StatsKeys 2: partitions of %s = %d; want 2", name, got)
		}
	}

	// The keeper stops (the tickets, never settled, are renewed no
	// more), the leases expire (a minute) and the window passes: nothing
	// is near its limit.
	ctl.Close()
	clock.Advance(time.Hour + time.Minute)
	got := figures(ctl)
	if got["conc"][1] != 0 || got["fw"][1] != 0 {
		t.Errorf("after the leases expired and the window passed: near limit = %d (conc), %d (fw); want 0", got["conc"][1], got["fw"][1])
	}
}

// dump returns every key of the server with its type and contents (not
// its expiry, which the wall clock moves).
func dump(t *testing.T, addr string) string {
	t.Helper()
	keys, err := redistest.Do(addr, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	list := strings.Split(keys, "\n")
	slices.Sort(list)
	var out string
	for _, k := range list {
		if k == "" {
			continue
		}
		typ, _ := redistest.Do(addr, "TYPE", k)
		var v string
		if typ == "hash" {
			v, err = redistest.Do(addr, "HGETALL", k)
			pairs := strings.Split(v, "\n")
			slices.Sort(pairs) // a field and its value: sorted together, enough to compare
			v = strings.Join(pairs, "\n")
		} else {
			v, err = redistest.Do(addr, "GET", k)
		}
		if err != nil {
			t.Fatal(err)
		}
		out += "\n" + k + " " + typ + " " + v
	}
	return out
}
