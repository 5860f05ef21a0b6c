package envoyrls_test

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/admission/envoyrls"
)

// TestPendingMemory: over gRPC on loopback, each request-phase estimate
// held for its response-phase actual costs a bounded number of bytes,
// measured as the heap the server holds after 10,000 of them with request
// ids of the longest length (the ticket the controller keeps for each,
// about 570 bytes, and the table's entry).
func TestPendingMemory(t *testing.T) {
	cfg := mustParse(t, `
domain: ai
descriptors:
  - key: tenant
    tenant: true
    rate_limit: {unit: day, requests_per_unit: 1000000000, counts: tokens}
`)
	r := start(t, cfg, rigOption{})
	const n = 10_000
	rid := func(i int) string {
		s := strconv.Itoa(i)
		return string(make([]byte, 128-len(s))) + s
	}
	call := func(i int) {
		r.call("ai", hits(desc("tenant", "acme-"+strconv.Itoa(i%100), envoyrls.RequestIDKey, rid(i)), 100))
	}
	// Warm the pools and the partitions, then measure the table alone.
	for i := range 500 {
		call(-1 - i)
	}
	var before, after runtime.MemStats
	// Two collections empty the pools (sync.Pool keeps its objects one
	// collection more), so that every ticket the table holds is counted.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		call(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("bytes per pending request id: %d", per)
	if st := r.srv.Stats(); st.Untracked != 0 {
		t.Fatalf("untracked estimates = %d; want 0", st.Untracked)
	}
	if per > maxPendingBytes {
		t.Errorf("a pending request id holds %d bytes of heap; want at most %d", per, maxPendingBytes)
	}
}

const maxPendingBytes = 800
