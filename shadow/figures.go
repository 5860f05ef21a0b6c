package shadow

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// Figures are what one policy decided over a span of traffic: the last
// window of live traffic (Recorder.Report, and the status page of package
// shadow/status that shows it) or a request log replayed through a
// candidate configuration (package shadow/replay). The three give a
// policy's figures in this one form, so that what a replay predicts and
// what the live report measures compare field by field.
type Figures struct {
	// Policy is the policy's name.
	Policy string `json:"policy"`
	// Mode is the policy's mode (in the live report, at its last
	// decision). For a Shadow policy the refusals are would-rejects: what
	// enforcing it would have rejected.
	Mode limits.Mode `json:"mode"`
	// Algorithm, Unit and Limit describe the policy as configured (Limit
	// is its own limit; plans may give tenants others). Recorder.Report
	// sees decisions, not configurations: it leaves Limit zero.
	Algorithm limits.Algorithm `json:"algorithm"`
	Unit      limits.Unit      `json:"unit"`
	Limit     int64            `json:"limit"`
	// Requests counts the requests the policy applies to in the span:
	// those it decided, and in a replay also those another policy
	// rejected before it decided (bypassed).
	Requests int64 `json:"requests"`
	// Rejected counts the requests it rejected (a queue timeout and a
	// fail-closed decision too), WouldReject those it would have
	// rejected in shadow mode, Refused their sum.
	Rejected    int64 `json:"rejected"`
	WouldReject int64 `json:"would_reject"`
	Refused     int64 `json:"refused"`
	// Ratio is Refused / Requests.
	Ratio float64 `json:"ratio"`
	// Tenants are the tenants with refused requests, most refused first
	// (the top ones asked for), then by name.
	Tenants []TenantFigures `json:"tenants,omitempty"`
	// Buckets are the span's slices, oldest first, each with its own
	// figures (empty slices too): the ratio over time. A replay draws its
	// own, per tenant (replay.Series), and leaves Buckets empty.
	Buckets []Bucket `json:"buckets,omitempty"`
}

// TenantFigures are one tenant's part of a policy's refusals.
type TenantFigures struct {
	// Tenant is the tenant (in a Recorder's report, a hostile name
	// hashed: see Recorder), or OtherTenant for the tenants not tracked by
	// name.
	Tenant string `json:"tenant"`
	// Requests counts the tenant's requests: under the policy in the live
	// report; in a replay, all the tenant's records in the log (zero when
	// the tenant was not among the log's first tracked tenants).
	Requests int64 `json:"requests"`
	// Rejected and WouldReject count the tenant's refusals by the
	// policy, Refused their sum.
	Rejected    int64 `json:"rejected"`
	WouldReject int64 `json:"would_reject"`
	Refused     int64 `json:"refused"`
	// Ratio is the share of the tenant's own requests refused (zero when
	// Requests is).
	Ratio float64 `json:"ratio"`
	// Share is the tenant's share of all the policy's refusals.
	Share float64 `json:"share"`
}

// A Bucket is a policy's decisions in one slice of a span.
type Bucket struct {
	// Start is when the slice began.
	Start time.Time `json:"start"`
	// Requests and Refused count the decisions; Ratio is their ratio.
	Requests int64   `json:"requests"`
	Refused  int64   `json:"refused"`
	Ratio    float64 `json:"ratio"`
}

// Total sets f.Refused and f.Ratio from the counts, and each tenant's
// Refused, Ratio and Share; it sorts the tenants most refused first (then
// by name), leaves out those with no refusal and keeps the first top (all
// of them when top is not positive).
func (f *Figures) Total(top int) {
	f.Refused = f.Rejected + f.WouldReject
	f.Ratio = Ratio(f.Refused, f.Requests)
	f.Tenants = slices.DeleteFunc(f.Tenants, func(t TenantFigures) bool { return t.Rejected+t.WouldReject == 0 })
	for i := range f.Tenants {
		t := &f.Tenants[i]
		t.Refused = t.Rejected + t.WouldReject
		t.Ratio = Ratio(t.Refused, t.Requests)
		t.Share = Ratio(t.Refused, f.Refused)
	}
	slices.SortFunc(f.Tenants, func(a, b TenantFigures) int {
		if c := cmp.Compare(b.Refused, a.Refused); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	if top > 0 {
		f.Tenants = f.Tenants[:min(top, len(f.Tenants))]
	}
}

// Ratio returns n/d, zero when d is.
func Ratio(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}
