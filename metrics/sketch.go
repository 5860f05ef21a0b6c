package metrics

import (
	"cmp"
	"container/heap"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
)

// Other is the tenant label value that stands for every tenant outside the
// exported top K.
const Other = "__other__"

// NoTenant is the tenant label value of requests without a tenant.
const NoTenant = "__none__"

// The classes a sketch counts per tenant, also the tenant metrics'
// decision label values.
const (
	classAdmitted = iota
	classRejected
	classWouldReject
	numClasses
)

var classNames = [numClasses]string{"admitted", "rejected", "would_reject"}

// A sketch finds the tenants with the most refused (rejected and
// would-reject) cost of one policy in bounded memory, with the Space-Saving
// algorithm (Metwally, Agrawal and El Abbadi, 2005): it monitors at most a
// fixed number of tenants; a refused tenant that is not monitored replaces
// the one with the least refused cost and inherits that cost as an
// over-estimate. Any tenant whose refused cost exceeds total/capacity is
// guaranteed to be monitored. Admitted work only takes a free slot, never
// someone else's, so with few tenants everyone is visible and with many the
// refused ones win.
//
// Besides the ranking weight, each monitored tenant keeps exact per-class
// figures counted since it has been monitored: those are what is exported,
// so an exported tenant's counter is a lower bound that only grows.
//
// Tenants are spread over shards by hash: each tenant lives in one shard
// and updates for different tenants rarely contend.
type sketch struct {
	seed   maphash.Seed
	shards [sketchShards]sketchShard
}

const sketchShards = 8

type sketchShard struct {
	mu     sync.Mutex
	cap    int
	byName map[string]*ssEntry
	heap   ssHeap
	weight [numClasses]uint64 // cost of every event seen, per class
	events [numClasses]uint64 // events seen, per class
	_      [64]byte
}

// ssEntry is one monitored tenant.
type ssEntry struct {
	tenant string
	rank   uint64 // estimated refused cost, an upper bound
	weight [numClasses]uint64
	events [numClasses]uint64
	util   peak
	index  int // position in the heap
}

// A peak is the highest utilisation noted in the current and the
// previous UtilizationWindow, windows numbered from the clock (epochs):
// reading it changes nothing, so every reader sees the same peak.
type peak struct {
	cur, prev float64
	epoch     int64 // the window of cur
}

// note notes utilisation u in window ep.
func (p *peak) note(u float64, ep int64) {
	switch {
	case ep <= p.epoch: // a clock that went back stays in the window
	case ep == p.epoch+1:
		p.prev, p.cur, p.epoch = p.cur, 0, ep
	default:
		p.prev, p.cur, p.epoch = 0, 0, ep
	}
	p.cur = max(p.cur, u)
}

// at returns the peak as seen in window ep.
func (p *peak) at(ep int64) float64 {
	switch {
	case ep <= p.epoch:
		return max(p.cur, p.prev)
	case ep == p.epoch+1:
		return p.cur
	}
	return 0
}

func newSketch(capacity int) *sketch {
	s := &sketch{seed: maphash.MakeSeed()}
	per := max((capacity+sketchShards-1)/sketchShards, 4)
	for i := range s.shards {
		s.shards[i].cap = per
		s.shards[i].byName = make(map[string]*ssEntry, per)
	}
	return s
}

// add records an event of the given cost in class c for tenant, whose
// partition is at utilisation util in window ep.
func (s *sketch) add(tenant string, c int, cost uint64, util float64, ep int64) {
	sh := &s.shards[maphash.String(s.seed, tenant)%sketchShards]
	sh.mu.Lock()
	sh.weight[c] += cost
	sh.events[c]++
	e, ok := sh.byName[tenant]
	switch {
	case ok:
	case len(sh.heap) < sh.cap:
		e = &ssEntry{tenant: strings.Clone(tenant)}
		sh.byName[e.tenant] = e
		heap.Push(&sh.heap, e)
	case c == classAdmitted:
		sh.mu.Unlock()
		return
	default:
		e = sh.heap[0]
		delete(sh.byName, e.tenant)
		*e = ssEntry{tenant: strings.Clone(tenant), rank: e.rank, index: e.index}
		sh.byName[e.tenant] = e
	}
	if c != classAdmitted {
		e.rank += cost
	}
	e.weight[c] += cost
	e.events[c]++
	if util > 0 {
		e.util.note(util, ep)
	}
	heap.Fix(&sh.heap, e.index)
	sh.mu.Unlock()
}

// touch notes the utilisation of a monitored tenant's partition in
// window ep; it does not make a tenant monitored.
func (s *sketch) touch(tenant string, util float64, ep int64) {
	sh := &s.shards[maphash.String(s.seed, tenant)%sketchShards]
	sh.mu.Lock()
	if e, ok := sh.byName[tenant]; ok {
		e.util.note(util, ep)
	}
	sh.mu.Unlock()
}

// tenantCount is one monitored tenant's figures.
type tenantCount struct {
	tenant string
	rank   uint64
	weight [numClasses]uint64
	events [numClasses]uint64
	util   float64
}

// sketchTotals are the figures of the whole stream.
type sketchTotals struct {
	weight [numClasses]uint64
	events [numClasses]uint64
}

// top returns the k monitored tenants with the most refused cost (then
// the most admitted cost), heaviest first, with their utilisation peaks as
// of window ep, and the stream's totals. dst is reused for the result.
func (s *sketch) top(k int, ep int64, dst []tenantCount) ([]tenantCount, sketchTotals) {
	dst = dst[:0]
	var t sketchTotals
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for c := range numClasses {
			t.weight[c] += sh.weight[c]
			t.events[c] += sh.events[c]
		}
		for _, e := range sh.heap {
			dst = append(dst, tenantCount{tenant: e.tenant, rank: e.rank, weight: e.weight, events: e.events, util: e.util.at(ep)})
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(dst, func(a, b tenantCount) int {
		if c := cmp.Compare(b.rank, a.rank); c != 0 {
			return c
		}
		if c := cmp.Compare(b.weight[classAdmitted], a.weight[classAdmitted]); c != 0 {
			return c
		}
		return strings.Compare(a.tenant, b.tenant)
	})
	return dst[:min(k, len(dst))], t
}

// ssHeap is a min-heap of entries by refused cost, then admitted cost.
type ssHeap []*ssEntry

func (h ssHeap) Len() int { return len(h) }
func (h ssHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].weight[classAdmitted] < h[j].weight[classAdmitted]
}
func (h ssHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *ssHeap) Push(x any) {
	e := x.(*ssEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *ssHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
