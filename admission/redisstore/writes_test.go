package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// commandCalls returns the calls of each Redis command since the last
// CONFIG RESETSTAT, by name (INFO commandstats).
func commandCalls(t *testing.T, addr string) map[string]string {
	t.Helper()
	stats, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]string{}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, isCalls := strings.CutPrefix(f, "calls="); isCalls {
				calls[name] = v
			}
		}
	}
	return calls
}

// TestSettleEmptiesKeysInOneCommand settles a request of a tenant's
// token bucket on tokens (which refills to full before the settlement
// runs) and its concurrency lease (the partition's only one): both keys
// are emptied, by one DEL, and the settlement writes nothing else.
func TestSettleEmptiesKeysInOneCommand(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(newClient(t, srv.Addr), redisstore.Config{Prefix: uniquePrefix(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tenant := []limits.KeyPart{limits.KeyTenant}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "tpm", Key: tenant, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Second, Store: "redis"},
		{Name: "inflight", Key: tenant, Algorithm: limits.Concurrency, Limit: 10, MaxHold: time.Minute, Store: "redis"},
	}}, admission.WithStore("redis", st))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme", Tokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := redistest.Do(srv.Addr, "DBSIZE"); err != nil || n != "2" {
		t.Fatalf("DBSIZE after the admission = %q, %v; want the bucket and the partition", n, err)
	}
	// The bucket refills 100 tokens in about 91ns: it is full again by
	// the time the settlement runs.
	time.Sleep(time.Millisecond)
	if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	tk.Settle(admission.Usage{Tokens: 80})
	poll.Until(t, time.Second, "DBSIZE 0 after the settlement", func() bool {
		n, err := redistest.Do(srv.Addr, "DBSIZE")
		return err == nil && n == "0"
	})
	calls := commandCalls(t, srv.Addr)
	if calls["del"] != "1" {
		t.Errorf("DEL calls %q; want the two keys emptied by one (all calls %v)", calls["del"], calls)
	}
	for _, w := range []string{"set", "hset", "hdel", "pexpire"} {
		if calls[w] != "" {
			t.Errorf("%s calls %s; want none (all calls %v)", w, calls[w], calls)
		}
	}
}
