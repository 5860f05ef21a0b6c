package httpretry

import (
	"fmt"
	"testing"
)

// TestHostTableBounded: the table of hosts with retries in flight holds
// at most maxHosts entries, refuses a retry to one more host, and drops
// each host's entry when its last retry ends.
func TestHostTableBounded(t *testing.T) {
	tr := &Transport{MaxRetriesPerHost: 2}
	for i := range maxHosts {
		if !tr.acquire(fmt.Sprintf("h%d:443", i)) {
			t.Fatalf("acquire(h%d) = false with %d hosts tracked; want true", i, i)
		}
	}
	if tr.acquire("new:443") {
		t.Errorf("acquire(new) with %d hosts tracked = true; want false", maxHosts)
	}
	if !tr.acquire("h0:443") || tr.acquire("h0:443") {
		t.Errorf("a tracked host's second slot is not given, or its third is")
	}
	tr.release("h1:443")
	if !tr.acquire("new:443") {
		t.Errorf("acquire(new) after a host's last retry ended = false; want true")
	}
	tr.release("new:443")
	tr.release("h0:443")
	tr.release("h0:443")
	for i := 2; i < maxHosts; i++ {
		tr.release(fmt.Sprintf("h%d:443", i))
	}
	if n := len(tr.retrying); n != 0 {
		t.Errorf("%d hosts tracked after every retry ended; want 0", n)
	}
}
