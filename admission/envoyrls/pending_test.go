package envoyrls

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// TestPendingOrderBounded: the table's expiry order stays within a
// multiple of its bound when estimates are reconciled (or a request id
// repeats) faster than they expire: memory is bounded by the table's
// count, not by the request rate times the time to live.
func TestPendingOrderBounded(t *testing.T) {
	now := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		step func(p *pendingTable, i int)
	}{
		{"reconciled", func(p *pendingTable, i int) {
			id := p.id("pol", "tenant", "user", strconv.Itoa(i))
			p.put(id, admission.Ticket{}, now)
			p.take(id, now)
		}},
		{"one request id", func(p *pendingTable, i int) {
			p.put(p.id("pol", "tenant", "user", "same"), admission.Ticket{}, now)
		}},
		{"actuals first", func(p *pendingTable, i int) {
			id := p.id("pol", "tenant", "user", strconv.Itoa(i))
			p.markSettled(id, now)
			p.settledEarly(id, now)
		}},
	} {
		p := newPendingTable()
		p.max, p.ttl = 100, time.Hour
		for i := range 10_000 {
			c.step(p, i)
		}
		if got := len(p.order); got > 2*p.max {
			t.Errorf("%s: %d keys in the expiry order of a table of %d entries at most; want at most %d", c.name, got, p.max, 2*p.max)
		}
	}
}
