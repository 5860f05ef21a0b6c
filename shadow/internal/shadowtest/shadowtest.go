// Package shadowtest holds what the tests of package shadow and its
// sub-packages share: golden files, the tenant key, a controller observer
// counting decisions the way a replay does (to compare a replay or a
// status page with the live traffic they describe).
package shadowtest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Golden compares got with testdata/name, or rewrites it with -update.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs; got:\n%s\nwant:\n%s", name, got, want)
	}
}

// TenantKey partitions a policy by tenant.
func TenantKey() []limits.KeyPart { return []limits.KeyPart{limits.KeyTenant} }

// LiveCounts counts a controller's decisions per policy as the replay
// does: admitted (not rolled back), rejected (a timeout too) and would
// reject. Read its maps once the traffic is over.
type LiveCounts struct {
	admission.NopObserver
	mu                              sync.Mutex
	Admitted, Rejected, WouldReject map[string]int64
}

// NewLiveCounts returns an empty LiveCounts.
func NewLiveCounts() *LiveCounts {
	return &LiveCounts{Admitted: map[string]int64{}, Rejected: map[string]int64{}, WouldReject: map[string]int64{}}
}

// Decision counts d.
func (c *LiveCounts) Decision(d *admission.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch d.Outcome {
	case admission.Admitted:
		if !d.RolledBack {
			c.Admitted[d.Policy]++
		}
	case admission.Rejected, admission.Timeout:
		c.Rejected[d.Policy]++
	case admission.WouldReject:
		c.WouldReject[d.Policy]++
	}
}

// T0 is the instant the tests' traffic starts.
var T0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
