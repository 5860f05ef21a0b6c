package apikey_test

import (
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
)

// TestHashForm checks the stored form of a key's hash ("sha256:" and 64
// hex digits, as admitctl hash-key prints it) and that it parses back.
func TestHashForm(t *testing.T) {
	h := apikey.Sum("sk-example-acme-1")
	if got, want := h.String(), "sha256:e441e10e484da43fa24e869bb226e626905ba748647185f3d0cccd011c2e0b1c"; got != want {
		t.Errorf("Sum(sk-example-acme-1) = %s; want %s", got, want)
	}
	back, err := apikey.ParseHash(h.String())
	if err != nil || back != h {
		t.Errorf("ParseHash(%s) = %v, %v", h, back, err)
	}
}
