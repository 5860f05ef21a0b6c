package replay

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/shadow"
)

// Bounds of the series a replay keeps per policy.
const (
	// seriesBuckets is how many buckets a series has: the first is one
	// second wide, and widths double until the log fits.
	seriesBuckets = 96
	// SeriesTenants is how many tenants a series has by name; the others
	// are summed under shadow.OtherTenant.
	SeriesTenants = 5
)

// A Series is one policy's decisions over the log's time, in buckets of
// Step from Start (the first record's time), per tenant: the top tenants
// by refusals (then by requests decided), then shadow.OtherTenant for the rest
// (MaxTenants included). Every candidate's series of one replay have the
// same Start, Step and number of buckets, so they share their axes.
type Series struct {
	Start time.Time
	Step  time.Duration
	// Tenants holds SeriesTenants tenants at most, and shadow.OtherTenant.
	Tenants []TenantSeries
}

// TenantSeries is one tenant's decisions per bucket of a Series: the
// requests the policy admitted (not given back), rejected (a queue
// timeout too) and would have rejected, counted at the instant of the
// decision.
type TenantSeries struct {
	Tenant                          string
	Admitted, Rejected, WouldReject []int64
}

// Buckets returns the number of buckets of s.
func (s *Series) Buckets() int {
	if len(s.Tenants) == 0 {
		return 0
	}
	return len(s.Tenants[0].Admitted)
}

// series collects a Series during a replay.
type series struct {
	step    time.Duration
	tenants *tenantTable[tenantBuckets]
}

type tenantBuckets struct {
	admitted, rejected, would [seriesBuckets]int64
}

func newSeries(maxTenants int) *series {
	return &series{step: time.Second, tenants: newTenantTable[tenantBuckets](maxTenants)}
}

// slot returns the bucket of instant t of a series starting at origin,
// widening the buckets when t is past the last.
func (s *series) slot(origin, t time.Time) int {
	d := max(t.Sub(origin), 0)
	for d/s.step >= seriesBuckets {
		s.widen()
	}
	return int(d / s.step)
}

// widen doubles the buckets' width, folding pairs.
func (s *series) widen() {
	s.step *= 2
	for _, tb := range s.tenants.m {
		for _, a := range []*[seriesBuckets]int64{&tb.admitted, &tb.rejected, &tb.would} {
			for i := range seriesBuckets / 2 {
				a[i] = a[2*i] + a[2*i+1]
			}
			clear(a[seriesBuckets/2:])
		}
	}
}

// report returns the series with buckets of step (a multiple of s.step
// by a power of two) and n of them.
func (s *series) report(start time.Time, step time.Duration, n int) *Series {
	for s.step < step {
		s.widen()
	}
	type total struct {
		name             string
		refused, decided int64
	}
	var order []total
	for name, tb := range s.tenants.m {
		var t total
		t.name = name
		for i := range seriesBuckets {
			t.refused += tb.rejected[i] + tb.would[i]
			t.decided += tb.admitted[i] + tb.rejected[i] + tb.would[i]
		}
		order = append(order, t)
	}
	slices.SortFunc(order, func(a, b total) int {
		if a.name == shadow.OtherTenant || b.name == shadow.OtherTenant {
			return boolCmp(a.name == shadow.OtherTenant, b.name == shadow.OtherTenant)
		}
		if c := cmp.Compare(b.refused, a.refused); c != 0 {
			return c
		}
		if c := cmp.Compare(b.decided, a.decided); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	out := &Series{Start: start, Step: step}
	var other *TenantSeries
	for i, t := range order {
		tb := s.tenants.m[t.name]
		if i >= SeriesTenants || t.name == shadow.OtherTenant {
			if other == nil {
				other = &TenantSeries{Tenant: shadow.OtherTenant, Admitted: make([]int64, n), Rejected: make([]int64, n), WouldReject: make([]int64, n)}
			}
			for j := range n {
				other.Admitted[j] += tb.admitted[j]
				other.Rejected[j] += tb.rejected[j]
				other.WouldReject[j] += tb.would[j]
			}
			continue
		}
		out.Tenants = append(out.Tenants, TenantSeries{
			Tenant: t.name, Admitted: slices.Clone(tb.admitted[:n]), Rejected: slices.Clone(tb.rejected[:n]), WouldReject: slices.Clone(tb.would[:n]),
		})
	}
	if other != nil {
		out.Tenants = append(out.Tenants, *other)
	}
	return out
}

// boolCmp orders false before true.
func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
