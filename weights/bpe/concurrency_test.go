package bpe

import (
	"sync"
	"testing"
)

// TestConcurrentUse counts and encodes the corpus from several goroutines at
// once; run with -race it checks that an Encoding is safe to share.
func TestConcurrentUse(t *testing.T) {
	texts := corpus(t)
	for _, e := range encodings(t) {
		want := map[string]int{}
		for name, text := range texts {
			want[name] = len(reference(t, e.Name()).Encode(text, nil, nil))
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for range 3 {
					for name, text := range texts {
						var got int
						if g%2 == 0 {
							got = e.CountString(text)
						} else {
							got = len(e.Encode(nil, []byte(text)))
						}
						if got != want[name] {
							t.Errorf("%s: goroutine %d counted %d tokens in %s; want %d", e.Name(), g, got, name, want[name])
						}
					}
				}
			})
		}
		wg.Wait()
	}
}
