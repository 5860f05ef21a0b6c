package httpadmit

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/sluicehq/sluice/admission/apikey"
)

// Identity is a validated caller: the tenant billed, the credential used
// (as a short hash-derived id, never the credential) and the end user. It
// is what a policy file's API key stands for (apikey.Identity).
type Identity = apikey.Identity

// keyTable maps API key hashes (apikey.Sum) to the identities they
// stand for.
type keyTable = apikey.Table

// A KeyLookup finds the identity of an API key: a keyTable, a KeySet, or
// any other table of hashed keys (apikey.Lookup). Lookup is on every
// request's path: it must not block on I/O.
type KeyLookup = apikey.Lookup

// keyShards is the number of shards of a KeySet, indexed by the hash's
// first byte.
const keyShards = 256

// A KeySet is an immutable table of hashed API keys, sharded so that a
// change of one key (a tenant directory held in a database revokes or
// adds one) makes a new set sharing all but one of its 256 shards (With,
// Without), which a Snapshot installs whole. Lookups take no lock and
// allocate nothing. The zero KeySet is empty.
type KeySet struct {
	shards [keyShards]keyTable // each read only
	n      int
}

// newKeySet returns the set of the keys of t (t is not kept).
func newKeySet(t keyTable) *KeySet {
	s := &KeySet{n: len(t)}
	for i := range s.shards {
		s.shards[i] = make(keyTable, len(t)/keyShards)
	}
	for h, id := range t {
		s.shards[h[0]][h] = id
	}
	return s
}

// Lookup hashes key and returns its identity.
func (s *KeySet) Lookup(key string) (Identity, bool) {
	h := apikey.Sum(key)
	id, ok := s.shards[h[0]][h]
	return id, ok
}

// with returns s with one key added or replaced.
func (s *KeySet) with(h apikey.Hash, id Identity) *KeySet {
	return s.change(h, func(t keyTable) { t[h] = id })
}

// without returns s without one key: a revocation.
func (s *KeySet) without(h apikey.Hash) *KeySet {
	return s.change(h, func(t keyTable) { delete(t, h) })
}

// change returns s with fn applied to a copy of h's shard.
func (s *KeySet) change(h apikey.Hash, fn func(keyTable)) *KeySet {
	next := *s
	t := maps.Clone(s.shards[h[0]])
	if t == nil {
		t = keyTable{}
	}
	before := len(t)
	fn(t)
	next.shards[h[0]] = t
	next.n += len(t) - before
	return &next
}

// IdentityConfig says how the middleware identifies callers.
type IdentityConfig struct {
	// KeyHeaders are the request headers that may carry an API key, tried
	// in order. Authorization is read as "Bearer <key>"; any other header
	// holds the key itself. Empty means Authorization and X-API-Key.
	KeyHeaders []string
	// Keys maps API key hashes to identities. A request presenting a key
	// not in the table is refused with 401; it never gets a partition.
	Keys keyTable
	// KeySource, when set, is where API keys are looked up instead of
	// Keys: the middleware's own KeySet, built from Keys, which a tenant
	// directory changes one key at a time (Snapshot.WithKey), or an
	// application's table (WithKeyLookup).
	KeySource KeyLookup
	// TrustedProxies are the peers whose forwarding header is believed.
	// Empty means none: the client address is the TCP peer.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the forwarding header read when the peer is a
	// trusted proxy: "X-Forwarded-For" (the default) or "Forwarded", in
	// any case. New and Compile refuse any other name.
	ClientIPHeader string
	// AnonymousTenant is the tenant of callers that present no credential;
	// empty means "anonymous". Policies keyed by ip or ip_prefix still give
	// each anonymous address its own partition.
	AnonymousTenant string
	// RequireKey refuses callers without a credential with 401 instead of
	// admitting them as the anonymous tenant.
	RequireKey bool
	// SessionHeaders are the headers that may carry a request's agent
	// session id (admission.Request.Session), tried in order. Nil means
	// apikey.DefaultSessionHeaders; an empty, non-nil list reads none. A
	// value that apikey.ValidSession refuses is answered 400
	// (apikey.ErrInvalidSession), never used nor shortened. The
	// middleware reads them only while a policy in force is keyed by
	// session (limits.KeySession): a service without session policies
	// never refuses a request for its session header.
	SessionHeaders []string
	// MaxSessionLength is the longest session id accepted, in bytes;
	// zero means apikey.DefaultMaxSessionLength.
	MaxSessionLength int

	// canonical is set when KeyHeaders hold canonical header names, so
	// that they index the header map directly.
	canonical bool
}

// normalize returns a copy of ic whose key headers are canonical.
func (ic IdentityConfig) normalize() IdentityConfig {
	ic.KeyHeaders = canonicalHeaders(ic.KeyHeaders)
	ic.SessionHeaders = canonicalHeaders(ic.SessionHeaders)
	ic.canonical = true
	return ic
}

// sessionOf returns the session id r carries in the first of the
// session headers present, "" when none is, or apikey.ErrInvalidSession
// for a value apikey.ValidSession refuses (or a header sent twice).
func (ic *IdentityConfig) sessionOf(r *http.Request) (string, error) {
	hs := ic.SessionHeaders
	if hs == nil {
		hs = apikey.DefaultSessionHeaders
	}
	for _, h := range hs {
		vs := r.Header[h]
		if !ic.canonical {
			vs = r.Header.Values(h)
		}
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 || !apikey.ValidSession(vs[0], ic.MaxSessionLength) {
			return "", apikey.ErrInvalidSession
		}
		return vs[0], nil
	}
	return "", nil
}

// canonicalHeaders returns hs in canonical form (nil for nil).
func canonicalHeaders(hs []string) []string {
	if hs == nil {
		return nil
	}
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = textproto.CanonicalMIMEHeaderKey(h)
	}
	return out
}

// defaultAnonymousTenant is the tenant of unidentified callers.
const defaultAnonymousTenant = apikey.DefaultAnonymousTenant

// Errors returned by Identify. Both answer 401.
var (
	// ErrUnknownKey: the request carries an API key that is not in the
	// table (apikey.ErrUnknownKey).
	ErrUnknownKey = apikey.ErrUnknownKey
	// ErrNoCredentials: the request carries no credential and anonymous
	// callers are not admitted (apikey.ErrNoCredentials).
	ErrNoCredentials = apikey.ErrNoCredentials
	// ErrUnauthenticated: the WithIdentity function (or echo's
	// IdentifierExtractor) refused the caller. Errors wrapped by
	// unauthenticated match it.
	ErrUnauthenticated = errors.New("unauthenticated")
)

// unauthenticated returns err wrapped so that it matches
// ErrUnauthenticated (and still err): WriteError answers it with 401 and
// never shows its text. It returns nil for nil, and err itself when it
// already matches ErrUnknownKey, ErrNoCredentials or ErrUnauthenticated,
// or apikey.ErrInvalidSession (answered 400: the caller was identified).
func unauthenticated(err error) error {
	if err == nil || errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrNoCredentials) || errors.Is(err, ErrUnauthenticated) || errors.Is(err, apikey.ErrInvalidSession) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
}

// Identify returns the validated identity of r: the identity placed in its
// context by ContextWithIdentity, else the identity rules every transport
// shares (apikey.Rules) applied to its headers: the identity an API key
// maps to, or the anonymous tenant. It returns ErrUnknownKey for a key
// not in the table (or longer than apikey.MaxKeyLen) and
// ErrNoCredentials when a key is required and none was sent.
func (ic *IdentityConfig) Identify(r *http.Request) (Identity, error) {
	if id, ok := IdentityFrom(r.Context()); ok {
		return id, nil
	}
	rules := apikey.Rules{KeyHeaders: ic.KeyHeaders, Keys: ic.KeySource, AnonymousTenant: ic.AnonymousTenant, RequireKey: ic.RequireKey}
	if rules.Keys == nil && len(ic.Keys) > 0 {
		rules.Keys = ic.Keys
	}
	direct := ic.canonical || len(ic.KeyHeaders) == 0
	return rules.Identify(func(name string) string {
		if !direct {
			return r.Header.Get(name)
		}
		if vs := r.Header[name]; len(vs) > 0 {
			return vs[0]
		}
		return ""
	})
}

// CredentialHeader reports whether the header named k can carry a
// client credential under ic: one of its key headers (by default
// Authorization and X-API-Key), or a header that carries credentials in
// any common scheme (Authorization, Proxy-Authorization, X-Api-Key,
// Api-Key, Cookie, X-Auth-Token, X-Access-Token). A handler that forwards
// a request elsewhere must not send these on.
func (ic *IdentityConfig) CredentialHeader(k string) bool {
	switch textproto.CanonicalMIMEHeaderKey(k) {
	case "Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "Cookie", "X-Auth-Token", "X-Access-Token":
		return true
	}
	for _, h := range ic.KeyHeaders {
		if strings.EqualFold(h, k) {
			return true
		}
	}
	return false
}

// ClientAddr returns the client address of r: the TCP peer, or, when the
// peer is a trusted proxy, the first address not trusted in the forwarding
// header read right to left (the entries on the left were written by the
// client and prove nothing). IPv6 addresses are grouped by their /64
// prefix, since one host usually owns a whole /64. It returns the zero
// Addr when the peer address cannot be parsed.
func (ic *IdentityConfig) ClientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	var peer netip.Addr
	if err == nil {
		peer = ap.Addr()
	} else if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		peer = a
	} else {
		return netip.Addr{}
	}
	peer = peer.Unmap()
	addr := peer
	if ic.trusted(peer) {
		addr = ic.forwarded(r, peer)
	}
	return apikey.Group(addr)
}

// trusted reports whether a, unmapped, is a trusted proxy. A prefix
// written in IPv4-mapped form (::ffff:10.0.0.0/104) holds the IPv4
// addresses it maps.
func (ic *IdentityConfig) trusted(a netip.Addr) bool {
	for _, p := range ic.TrustedProxies {
		if p.Contains(a) || a.Is4() && p.Addr().Is4In6() && p.Bits() >= 96 && p.Contains(netip.AddrFrom16(a.As16())) {
			return true
		}
	}
	return false
}

// forwarded walks the forwarding header right to left from a trusted peer
// and returns the first untrusted address, or the leftmost valid one when
// every hop is trusted. A malformed entry stops the walk: everything left of
// it is unverifiable, so the last trusted hop is the client.
func (ic *IdentityConfig) forwarded(r *http.Request, peer netip.Addr) netip.Addr {
	forwardedSyntax := strings.EqualFold(ic.ClientIPHeader, "Forwarded")
	name := "X-Forwarded-For"
	if forwardedSyntax {
		name = "Forwarded"
	}
	values := r.Header.Values(name)
	last := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var elem string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				elem, v = v[j+1:], v[:j]
			} else {
				elem, v = v, ""
			}
			var a netip.Addr
			var ok bool
			if forwardedSyntax {
				a, ok = parseForwardedFor(elem)
			} else {
				a, ok = parseHostAddr(strings.TrimSpace(elem))
			}
			if !ok {
				return last
			}
			a = a.Unmap()
			if !ic.trusted(a) {
				return a
			}
			last = a
		}
	}
	return last
}

// parseHostAddr parses "1.2.3.4", "1.2.3.4:80", "::1" or "[::1]:80".
func parseHostAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		return a, err == nil
	}
	return netip.Addr{}, false
}

// parseForwardedFor reads the for= parameter of one RFC 7239 element.
func parseForwardedFor(elem string) (netip.Addr, bool) {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		v = strings.Trim(v, `"`)
		return parseHostAddr(v)
	}
	return netip.Addr{}, false
}
