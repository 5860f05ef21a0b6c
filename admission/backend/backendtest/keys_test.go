package backendtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
)

// slotStore is a store that maps each partition key to a slot of its own
// (as a cache of slots might) and keeps the in-memory store's partitions
// under the slots' names. Unless copyKeys is set it keeps the keys as it
// is given them, without copying: the defect the suite must catch, as
// under the controller (which hands stores views of a reused buffer) such
// a store loses its partitions and admits past its limits.
type slotStore struct{ copyKeys bool }

func (s slotStore) Limiter(p *limits.Policy) (backend.Limiter, error) {
	inner, err := memstore.Store{}.Limiter(p)
	return &slotLimiter{inner: inner, copyKeys: s.copyKeys, slots: map[string]string{}}, err
}

type slotLimiter struct {
	inner    backend.Limiter
	copyKeys bool
	mu       sync.Mutex
	slots    map[string]string
}

func (l *slotLimiter) slot(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.slots[key]; ok {
		return s
	}
	s := fmt.Sprintf("slot%d", len(l.slots))
	if l.copyKeys {
		key = strings.Clone(key)
	}
	l.slots[key] = s
	return s
}

func (l *slotLimiter) Acquire(ctx context.Context, key string, lim *limits.Limit, n int64, now time.Time, g *backend.Grant) error {
	return l.inner.Acquire(ctx, l.slot(key), lim, n, now, g)
}

func (l *slotLimiter) Adjust(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, delta int64, now time.Time) error {
	return l.inner.Adjust(ctx, l.slot(key), lim, g, delta, now)
}

func (l *slotLimiter) Release(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	return l.inner.Release(ctx, l.slot(key), lim, g, now)
}

func (l *slotLimiter) Renew(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	return l.inner.(backend.Renewer).Renew(ctx, l.slot(key), lim, g, now)
}

var traffic = backendtest.Traffic{Seed: 1, Ops: 1000, Keys: 3, MaxN: 6, MaxDt: 200 * time.Millisecond}

// suiteEnv names the suite TestSlotStoreUncopied runs, when set: the
// test that runs it in a child process expects it to fail.
const suiteEnv = "BACKENDTEST_UNCOPIED_SUITE"

// TestSlotStoreUncopied runs one suite against the store that keeps keys
// uncopied, in the child process TestSuiteCatchesUncopiedKeys starts.
func TestSlotStoreUncopied(t *testing.T) {
	newStore := func(*testing.T) backend.Store { return slotStore{} }
	switch os.Getenv(suiteEnv) {
	case "cases":
		backendtest.RunCases(t, newStore)
	case "properties":
		backendtest.RunProperties(t, newStore, traffic)
	default:
		t.Skip("run by TestSuiteCatchesUncopiedKeys")
	}
}

// TestSuiteCatchesUncopiedKeys checks that RunCases and RunProperties
// each fail a store that keeps the keys it is given without copying them,
// and pass the same store when it copies them.
func TestSuiteCatchesUncopiedKeys(t *testing.T) {
	copying := func(*testing.T) backend.Store { return slotStore{copyKeys: true} }
	backendtest.RunCases(t, copying)
	backendtest.RunProperties(t, copying, traffic)
	if t.Failed() {
		t.Fatal("the suite fails the store that copies its keys")
	}
	for _, suite := range []string{"cases", "properties"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSlotStoreUncopied$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), suiteEnv+"="+suite)
		out, err := cmd.CombinedOutput()
		if _, failed := err.(*exec.ExitError); !failed || !strings.Contains(string(out), "--- FAIL: TestSlotStoreUncopied/") {
			t.Errorf("the %s suite against a store keeping keys uncopied: err = %v; want a failed sub-test. Output:\n%s", suite, err, out)
		}
	}
}
