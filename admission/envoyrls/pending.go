package envoyrls

import (
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// pendingTable holds request-phase tickets until their response-phase
// actual arrives, and remembers actuals that arrived first, so that each
// request is charged its actual once. It is bounded in entries and time:
// entries expire in insertion order after ttl (a ticket then stays charged
// at its estimate), and the expiry order keeps at most two keys per entry
// allowed, however many requests are reconciled within a ttl.
//
// An entry is keyed by a 128-bit hash of its policy, tenant, partition and
// request id (two hashes of the table's own random seeds, which a client
// cannot learn, so it cannot choose two requests that share a key), not
// by their text: a request id is up to 128 bytes, and the table holds up
// to DefaultMaxPending of them. What an entry costs is measured by
// TestPendingMemory.
type pendingTable struct {
	mu      sync.Mutex
	max     int
	ttl     time.Duration
	seeds   [2]maphash.Seed
	entries map[pendingID]pendingEntry
	order   []pendingKey // insertion order, for expiry
	last    int64        // the last insertion's expiry
}

// pendingID identifies a request's reconciliation entry.
type pendingID struct{ a, b uint64 }

type pendingEntry struct {
	ticket admission.Ticket
	// expires (unix ns) is unique to the insertion that put the entry,
	// which its order key names: a later one expires at least 1ns after.
	expires int64
	settled bool // the actual came first: only a marker
}

type pendingKey struct {
	id      pendingID
	expires int64
}

func newPendingTable() *pendingTable {
	return &pendingTable{
		max: DefaultMaxPending, ttl: DefaultPendingTTL,
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		entries: map[pendingID]pendingEntry{},
	}
}

// id returns the entry key of parts, each hashed with its length so that
// no choice of values makes two requests share their text.
func (p *pendingTable) id(parts ...string) pendingID {
	var h [2]maphash.Hash
	var n [20]byte
	for i := range h {
		h[i].SetSeed(p.seeds[i])
		for _, part := range parts {
			h[i].Write(strconv.AppendInt(n[:0], int64(len(part)), 10))
			h[i].WriteByte(':')
			h[i].WriteString(part)
		}
	}
	return pendingID{h[0].Sum64(), h[1].Sum64()}
}

// expire drops the entries whose time has passed; the caller holds mu.
func (p *pendingTable) expire(now int64) {
	n := 0
	for ; n < len(p.order) && now >= p.order[n].expires; n++ {
		k := p.order[n]
		if e, ok := p.entries[k.id]; ok && e.expires == k.expires {
			delete(p.entries, k.id)
			e.ticket.Done()
		}
	}
	p.order = p.order[n:]
	if cap(p.order) > 2*p.max && len(p.order) < p.max {
		p.order = append([]pendingKey(nil), p.order...)
	}
}

func (p *pendingTable) insert(id pendingID, e pendingEntry, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := now.UnixNano()
	p.expire(ns)
	if old, ok := p.entries[id]; ok {
		// A request id seen twice: the first estimate stays charged.
		old.ticket.Done()
	} else if len(p.entries) >= p.max {
		return false
	}
	p.last = max(ns+int64(p.ttl), p.last+1)
	e.expires = p.last
	p.entries[id] = e
	p.order = append(p.order, pendingKey{id, e.expires})
	if len(p.order) > 2*p.max {
		p.compact()
	}
	return true
}

// compact drops the order keys of entries taken or replaced before they
// expired, so that the order holds no more keys than the table entries
// (the caller holds mu).
func (p *pendingTable) compact() {
	n := 0
	for _, k := range p.order {
		if e, ok := p.entries[k.id]; ok && e.expires == k.expires {
			p.order[n] = k
			n++
		}
	}
	clear(p.order[n:])
	p.order = p.order[:n]
}

// put holds t for id; false when the table is full.
func (p *pendingTable) put(id pendingID, t admission.Ticket, now time.Time) bool {
	return p.insert(id, pendingEntry{ticket: t}, now)
}

// markSettled remembers that id's actual was charged before its estimate.
func (p *pendingTable) markSettled(id pendingID, now time.Time) {
	p.insert(id, pendingEntry{settled: true}, now)
}

// take removes and returns the ticket held for id.
func (p *pendingTable) take(id pendingID, now time.Time) (admission.Ticket, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now.UnixNano())
	e, ok := p.entries[id]
	if !ok || e.settled {
		return admission.Ticket{}, false
	}
	delete(p.entries, id)
	return e.ticket, true
}

// settledEarly reports (and forgets) whether id's actual came first.
func (p *pendingTable) settledEarly(id pendingID, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now.UnixNano())
	e, ok := p.entries[id]
	if !ok || !e.settled {
		return false
	}
	delete(p.entries, id)
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
