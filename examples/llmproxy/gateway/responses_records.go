package gateway

import (
	"container/list"
	"context"
	"sync"
)

// responseRecords keep, per tenant, the size of each response the gateway
// proxied: the tokens its chain holds. A tenant's record of an id is also
// its proof of ownership. Every implementation is bounded per tenant and
// overall, forgetting the oldest first.
type responseRecords interface {
	// get returns the size recorded for response id of tenant, and
	// whether tenant has a record of it.
	get(ctx context.Context, tenant, id string) (tokens int64, found bool, err error)
	// put records the size of response id for tenant, replacing its
	// record if it has one.
	put(ctx context.Context, tenant, id string, tokens int64) error
	// forget drops tenant's record of id.
	forget(ctx context.Context, tenant, id string) error
}

// recordKey names one record.
type recordKey struct{ tenant, id string }

// memRecord is one record of memRecords, in the list of all records and
// in its tenant's.
type memRecord struct {
	key          recordKey
	tokens       int64
	all, ofOwner *list.Element
}

// memRecords is the in-memory responseRecords.
type memRecords struct {
	max, perTenant int

	mu      sync.Mutex
	byKey   map[recordKey]*memRecord
	all     *list.List            // every record, oldest first
	tenants map[string]*list.List // each tenant's records, oldest first
}

var _ responseRecords = (*memRecords)(nil)

func newMemRecords(max, perTenant int) *memRecords {
	return &memRecords{max: max, perTenant: perTenant, byKey: map[recordKey]*memRecord{}, all: list.New(), tenants: map[string]*list.List{}}
}

func (m *memRecords) get(_ context.Context, tenant, id string) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byKey[recordKey{tenant, id}]
	if r == nil {
		return 0, false, nil
	}
	return r.tokens, true, nil
}

func (m *memRecords) put(_ context.Context, tenant, id string, tokens int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := recordKey{tenant, id}
	if r := m.byKey[k]; r != nil {
		r.tokens = tokens
		return nil
	}
	for own := m.tenants[tenant]; own != nil && own.Len() >= m.perTenant; own = m.tenants[tenant] {
		m.dropLocked(own.Front().Value.(*memRecord))
	}
	for m.all.Len() >= m.max {
		m.dropLocked(m.all.Front().Value.(*memRecord))
	}
	own := m.tenants[tenant] // after the evictions, which may drop an emptied list
	if own == nil {
		own = list.New()
		m.tenants[tenant] = own
	}
	r := &memRecord{key: k, tokens: tokens}
	r.all, r.ofOwner = m.all.PushBack(r), own.PushBack(r)
	m.byKey[k] = r
	return nil
}

func (m *memRecords) forget(_ context.Context, tenant, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.byKey[recordKey{tenant, id}]; r != nil {
		m.dropLocked(r)
	}
	return nil
}

// dropLocked forgets r, and its tenant's list once empty.
func (m *memRecords) dropLocked(r *memRecord) {
	delete(m.byKey, r.key)
	m.all.Remove(r.all)
	own := m.tenants[r.key.tenant]
	own.Remove(r.ofOwner)
	if own.Len() == 0 {
		delete(m.tenants, r.key.tenant)
	}
}
