package httpadmit_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/admission/httpadmit"
)

// FuzzClientAddr feeds arbitrary forwarding headers: parsing never
// panics, an untrusted peer is always its own client address, and a
// trusted peer never yields an address that appears nowhere.
func FuzzClientAddr(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.1, 10.0.0.2", false)
	f.Add("10.0.0.1:80", `for="[2001:db8::1]:80";proto=https, for=10.0.0.9`, true)
	f.Add("192.0.2.1:1", "garbage,,, ,", false)
	f.Add("[fd00::1]:1", "for=_hidden, for=unknown", true)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, peer, header string, forwarded bool) {
		ic := &httpadmit.IdentityConfig{TrustedProxies: trusted}
		name := "X-Forwarded-For"
		if forwarded {
			ic.ClientIPHeader, name = "Forwarded", "Forwarded"
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		r.Header.Set(name, header)
		got := ic.ClientAddr(r)
		ap, err := netip.ParseAddrPort(peer)
		if err != nil {
			return
		}
		p := ap.Addr().Unmap()
		trustedPeer := false
		for _, pf := range trusted {
			trustedPeer = trustedPeer || pf.Contains(p)
		}
		if !trustedPeer && got != httpadmit.Group(p) {
			t.Fatalf("untrusted peer %s with %s %q: client %s; want the peer", peer, name, header, got)
		}
	})
}
