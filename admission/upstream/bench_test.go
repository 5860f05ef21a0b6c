package upstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/admission/upstream"
)

// BenchmarkAcquire compares the upstream store's decision with the
// in-memory store's it wraps: for a group nothing was learned about, and
// for one with a learned budget that holds.
func BenchmarkAcquire(b *testing.B) {
	p := tpm()
	p.Limit = limits.MaxAmount
	lim := p.Base()
	s, _ := upstream.New(upstream.Config{})
	learned := *tokens(limits.MaxAmount, time.Hour)
	learned.Received = backendtest.Epoch
	s.Observe("learned", learned)
	peer, _ := memstore.Store{}.Limiter(&p)
	up, _ := s.Limiter(&p)
	for _, bc := range []struct {
		name  string
		l     backend.Limiter
		group string
	}{{"memstore", peer, "gpt-4o"}, {"upstream/unknown", up, "gpt-4o"}, {"upstream/learned", up, "learned"}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, now := context.Background(), backendtest.Epoch
			var g backend.Grant
			b.ReportAllocs()
			for b.Loop() {
				_ = bc.l.Acquire(ctx, bc.group, &lim, 1, now, &g)
			}
			if !g.OK {
				b.Fatal("refused")
			}
		})
	}
}
