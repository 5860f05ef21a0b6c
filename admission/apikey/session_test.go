package apikey_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
)

func TestValidSession(t *testing.T) {
	for _, tc := range []struct {
		id   string
		max  int
		want bool
	}{
		{"run-1", 0, true},
		{"sess_01J9Z:abc/def+=@~!", 0, true},
		{strings.Repeat("s", apikey.DefaultMaxSessionLength), 0, true},
		{strings.Repeat("s", apikey.DefaultMaxSessionLength+1), 0, false},
		{strings.Repeat("s", 16), 16, true},
		{strings.Repeat("s", 17), 16, false},
		{"", 0, false},
		{"a b", 0, false},
		{"a\x1fb", 0, false}, // the partition key separator
		{"a\nb", 0, false},
		{"a\x7fb", 0, false},
		{"séance", 0, false},
	} {
		if got := apikey.ValidSession(tc.id, tc.max); got != tc.want {
			t.Errorf("ValidSession(%q, %d) = %v; want %v", tc.id, tc.max, got, tc.want)
		}
	}
}

// FuzzValidSession: an id it accepts is within its bound and made of
// printable ASCII only.
func FuzzValidSession(f *testing.F) {
	for _, s := range []string{"run-1", "", "a b", "\x1f", strings.Repeat("x", 200)} {
		f.Add(s, 0)
	}
	f.Fuzz(func(t *testing.T, id string, max int) {
		if !apikey.ValidSession(id, max) {
			return
		}
		bound := max
		if bound <= 0 {
			bound = apikey.DefaultMaxSessionLength
		}
		if id == "" || len(id) > bound {
			t.Fatalf("ValidSession(%q, %d) = true; want false (length %d, bound %d)", id, max, len(id), bound)
		}
		for i := 0; i < len(id); i++ {
			if id[i] <= ' ' || id[i] > '~' {
				t.Fatalf("ValidSession(%q, %d) = true with byte %#x", id, max, id[i])
			}
		}
	})
}
