package apikey

import (
	"errors"
	"net/netip"
	"strings"
)

// MaxKeyLen bounds the API key a caller may present: a longer one is an
// unknown key, refused without being hashed. Real keys are a few dozen
// characters; the bound keeps a hostile header or metadata value from
// costing more than one short hash.
const MaxKeyLen = 1024

// DefaultAnonymousTenant is the tenant of callers that present no
// credential when Rules.AnonymousTenant is empty.
const DefaultAnonymousTenant = "anonymous"

// Errors returned by Rules.Identify. A transport answers them as
// unauthenticated (HTTP 401, gRPC codes.Unauthenticated), without a
// partition.
var (
	// ErrUnknownKey: the caller presents an API key that is not in the
	// table (or longer than MaxKeyLen).
	ErrUnknownKey = errors.New("unknown API key")
	// ErrNoCredentials: the caller presents no credential and anonymous
	// callers are not admitted.
	ErrNoCredentials = errors.New("no credentials")
	// ErrTenantMismatch: the caller names a tenant (Rules.TenantHeader)
	// other than the one its credential stands for.
	ErrTenantMismatch = errors.New("tenant does not match the credential")
)

// A Lookup finds the identity an API key stands for, by its hash (Sum).
// Lookup is on every request's path: it must not block on I/O.
type Lookup interface {
	Lookup(key string) (Identity, bool)
}

// A Table maps API key hashes (Sum) to the identities they stand for: the
// simplest Lookup, read only once in use.
type Table map[Hash]Identity

// Lookup hashes key and returns its identity.
func (t Table) Lookup(key string) (Identity, bool) {
	if len(t) == 0 {
		return Identity{}, false
	}
	id, ok := t[Sum(key)]
	return id, ok
}

// Rules are the identity rules every transport applies to the headers
// (HTTP) or metadata (gRPC) of a call: an API key looked up by its
// hash, else the anonymous tenant. A transport adapts its headers to a
// getter, func(name string) string, returning the first value of a name
// ("" when absent); the rules never see the transport.
type Rules struct {
	// KeyHeaders are the names that may carry an API key, tried in order,
	// passed to the getter as written. A name equal to "authorization"
	// in any case is read as "Bearer <key>"; any other holds the key
	// itself. Empty means DefaultKeyHeaders.
	KeyHeaders []string
	// Keys is where API keys are looked up; nil knows no key.
	Keys Lookup
	// TenantHeader, when set, names a header in which a caller may state
	// its tenant. It never chooses the tenant: a caller that sends it
	// must send the tenant its credential stands for (the anonymous
	// tenant without one), or be refused with ErrTenantMismatch.
	TenantHeader string
	// AnonymousTenant is the tenant of callers that present no
	// credential; empty means DefaultAnonymousTenant.
	AnonymousTenant string
	// RequireKey refuses callers without a credential (ErrNoCredentials)
	// instead of admitting them as the anonymous tenant.
	RequireKey bool
}

// DefaultKeyHeaders are the key headers of Rules without KeyHeaders, in
// HTTP's canonical form.
var DefaultKeyHeaders = []string{"Authorization", "X-Api-Key"}

// Identify returns the validated identity of a caller whose headers
// header returns: the identity its API key maps to, or the anonymous
// tenant. It returns ErrUnknownKey for a key not in the table,
// ErrNoCredentials when a key is required and none was sent, and
// ErrTenantMismatch for a stated tenant that is not the identity's.
func (r *Rules) Identify(header func(name string) string) (Identity, error) {
	id, err := r.identify(header)
	if err != nil || r.TenantHeader == "" {
		return id, err
	}
	if t := header(r.TenantHeader); t != "" && t != id.Tenant {
		return Identity{}, ErrTenantMismatch
	}
	return id, nil
}

// identify is Identify without the tenant check.
func (r *Rules) identify(header func(name string) string) (Identity, error) {
	if key, ok := r.Key(header); ok {
		if len(key) <= MaxKeyLen && r.Keys != nil {
			if id, ok := r.Keys.Lookup(key); ok {
				return id, nil
			}
		}
		return Identity{}, ErrUnknownKey
	}
	if r.RequireKey {
		return Identity{}, ErrNoCredentials
	}
	t := r.AnonymousTenant
	if t == "" {
		t = DefaultAnonymousTenant
	}
	return Identity{Tenant: t}, nil
}

// Key returns the API key the caller presents in the first key header
// that carries one: an "authorization" value must read "Bearer <key>".
func (r *Rules) Key(header func(name string) string) (string, bool) {
	hs := r.KeyHeaders
	if len(hs) == 0 {
		hs = DefaultKeyHeaders
	}
	for _, h := range hs {
		v := header(h)
		if v == "" {
			continue
		}
		if strings.EqualFold(h, "Authorization") {
			scheme, key, ok := strings.Cut(v, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				continue
			}
			v = strings.TrimSpace(key)
		}
		if v != "" {
			return v, true
		}
	}
	return "", false
}

// Group returns a client address as partitions see it: IPv4 unchanged,
// IPv6 reduced to the first address of its /64 (one host usually owns a
// whole /64, and could otherwise take a partition per address).
func Group(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}
