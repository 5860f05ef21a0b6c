package envoyrls

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// pendingTable holds request-phase tickets until their response-phase
// actual arrives, and remembers actuals that arrived first, so that each
// request is charged its actual once. It is bounded in entries and time:
// entries expire in insertion order after ttl (a ticket then stays charged
// at its estimate).
type pendingTable struct {
	mu      sync.Mutex
	max     int
	ttl     time.Duration
	entries map[string]pendingEntry
	order   []pendingKey // insertion order, for expiry
}

type pendingEntry struct {
	ticket  admission.Ticket
	settled bool // the actual came first: only a marker
	expires time.Time
}

type pendingKey struct {
	key     string
	expires time.Time
}

func newPendingTable() *pendingTable {
	return &pendingTable{max: DefaultMaxPending, ttl: DefaultPendingTTL, entries: map[string]pendingEntry{}}
}

// expire drops the entries whose time has passed; the caller holds mu.
func (p *pendingTable) expire(now time.Time) {
	n := 0
	for ; n < len(p.order) && !now.Before(p.order[n].expires); n++ {
		k := p.order[n]
		if e, ok := p.entries[k.key]; ok && e.expires.Equal(k.expires) {
			delete(p.entries, k.key)
			e.ticket.Done()
		}
	}
	p.order = p.order[n:]
	if cap(p.order) > 2*p.max && len(p.order) < p.max {
		p.order = append([]pendingKey(nil), p.order...)
	}
}

func (p *pendingTable) insert(key string, e pendingEntry, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	if old, ok := p.entries[key]; ok {
		// A request id seen twice: the first estimate stays charged.
		old.ticket.Done()
	} else if len(p.entries) >= p.max {
		return false
	}
	e.expires = now.Add(p.ttl)
	p.entries[key] = e
	p.order = append(p.order, pendingKey{key, e.expires})
	return true
}

// put holds t for key; false when the table is full.
func (p *pendingTable) put(key string, t admission.Ticket, now time.Time) bool {
	return p.insert(key, pendingEntry{ticket: t}, now)
}

// markSettled remembers that key's actual was charged before its estimate.
func (p *pendingTable) markSettled(key string, now time.Time) {
	p.insert(key, pendingEntry{settled: true}, now)
}

// take removes and returns the ticket held for key.
func (p *pendingTable) take(key string, now time.Time) (admission.Ticket, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	e, ok := p.entries[key]
	if !ok || e.settled {
		return admission.Ticket{}, false
	}
	delete(p.entries, key)
	return e.ticket, true
}

// settledEarly reports (and forgets) whether key's actual came first.
func (p *pendingTable) settledEarly(key string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	e, ok := p.entries[key]
	if !ok || !e.settled {
		return false
	}
	delete(p.entries, key)
	return true
}

// drain settles every held ticket at its estimate.
func (p *pendingTable) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.entries {
		e.ticket.Done()
		delete(p.entries, k)
	}
	p.order = nil
}
