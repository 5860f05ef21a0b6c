package shadow

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// Defaults of RecorderConfig.
const (
	DefaultWindow  = 15 * time.Minute
	DefaultBuckets = 15
	// DefaultMaxTenants bounds the tenants tracked per policy and bucket;
	// later ones are counted as OtherTenant.
	DefaultMaxTenants = 1000
)

// OtherTenant stands for the tenants a Recorder did not track by name.
const OtherTenant = "__other__"

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	// Window is how far back a report looks; zero means DefaultWindow.
	Window time.Duration
	// Buckets is how many slices the window is kept in: the report covers
	// the last Window to within Window/Buckets. Zero means DefaultBuckets.
	Buckets int
	// MaxTenants bounds the tenants tracked per policy per bucket; zero
	// means DefaultMaxTenants.
	MaxTenants int
}

// A Recorder is an admission.Observer that keeps, per policy, the
// decisions of the last window by tenant, in bounded memory, so that a CLI
// or an endpoint can answer "if policy X were enforced now, what would it
// reject, and whose requests?" with Report.
//
// It counts a request once per policy when the policy decides it:
// admitted, would-reject, or refused (rejected, timeout, fail-closed).
// Queue entries and cancellations are not decisions and are not counted.
type Recorder struct {
	admission.NopObserver
	cfg   RecorderConfig
	opts  options
	width int64 // bucket width in nanoseconds

	mu       sync.RWMutex
	policies map[string]*policyWindow
}

type policyWindow struct {
	mu      sync.Mutex
	mode    limits.Mode
	buckets []bucket
}

type bucket struct {
	epoch   int64 // start time / width; 0 means unused
	total   counts
	tenants map[string]*counts
}

type counts struct{ requests, refused int64 }

// NewRecorder returns a Recorder.
func NewRecorder(cfg RecorderConfig, opts ...Option) (*Recorder, error) {
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Buckets == 0 {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.MaxTenants == 0 {
		cfg.MaxTenants = DefaultMaxTenants
	}
	var errs []error
	if cfg.Window < 0 {
		errs = append(errs, errors.New("shadow: window must be > 0"))
	}
	if cfg.Buckets < 0 {
		errs = append(errs, errors.New("shadow: buckets must be > 0"))
	}
	if cfg.MaxTenants < 0 {
		errs = append(errs, errors.New("shadow: max tenants must be > 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Recorder{
		cfg: cfg, opts: buildOptions(opts),
		width:    max(int64(cfg.Window)/int64(cfg.Buckets), 1),
		policies: map[string]*policyWindow{},
	}, nil
}

// Decision counts a policy's decision for its tenant.
func (r *Recorder) Decision(d *admission.Decision) {
	var refused int64
	switch d.Outcome {
	case admission.Admitted, admission.FailOpen:
	case admission.WouldReject, admission.Rejected, admission.Timeout, admission.FailClosed:
		refused = 1
	default:
		return
	}
	r.mu.RLock()
	pw := r.policies[d.Policy]
	r.mu.RUnlock()
	if pw == nil {
		r.mu.Lock()
		if pw = r.policies[d.Policy]; pw == nil {
			pw = &policyWindow{buckets: make([]bucket, r.cfg.Buckets)}
			r.policies[strings.Clone(d.Policy)] = pw
		}
		r.mu.Unlock()
	}
	epoch := r.opts.clock.Now().UnixNano()/r.width + 1
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.mode = d.Mode
	b := &pw.buckets[epoch%int64(len(pw.buckets))]
	if b.epoch != epoch {
		b.epoch, b.total = epoch, counts{}
		clear(b.tenants)
	}
	if b.tenants == nil {
		b.tenants = map[string]*counts{}
	}
	b.total.requests++
	b.total.refused += refused
	c := b.tenants[d.Tenant]
	if c == nil {
		key := strings.Clone(d.Tenant)
		if len(b.tenants) >= r.cfg.MaxTenants {
			key = OtherTenant
		}
		if c = b.tenants[key]; c == nil {
			c = &counts{}
			b.tenants[key] = c
		}
	}
	c.requests++
	c.refused += refused
}

// A Report is what each policy decided over a window.
type Report struct {
	// Window is how far back the report looks.
	Window time.Duration
	// Policies are the policies that decided something in the window.
	Policies []PolicyReport
}

// PolicyReport is one policy's share of refused requests and the tenants
// they came from.
type PolicyReport struct {
	// Policy is the policy's name.
	Policy string
	// Mode is the policy's mode at its last decision. For a Shadow policy
	// Refused counts would-reject decisions: what enforcing it would
	// have rejected.
	Mode limits.Mode
	// Requests counts the policy's decisions in the window.
	Requests int64
	// Refused counts those rejected, timed out, failed closed or (in
	// shadow mode) that would have been rejected.
	Refused int64
	// Ratio is Refused / Requests.
	Ratio float64
	// Tenants are the tenants with refused requests, most refused first
	// (at most the top N asked for).
	Tenants []TenantReport
	// Buckets are the window's slices, oldest first, each with its own
	// figures (empty slices too): the ratio over time.
	Buckets []BucketReport
}

// BucketReport is a policy's decisions in one slice of the window.
type BucketReport struct {
	// Start is when the slice began.
	Start time.Time
	// Requests and Refused count the decisions; Ratio is their ratio.
	Requests, Refused int64
	Ratio             float64
}

// TenantReport is one tenant's part of a policy's refusals.
type TenantReport struct {
	// Tenant is the tenant, or OtherTenant.
	Tenant string
	// Requests and Refused count the tenant's decisions under the policy.
	Requests int64
	Refused  int64
	// Ratio is the share of the tenant's own requests refused.
	Ratio float64
	// Share is the tenant's share of all the policy's refusals.
	Share float64
}

// Report returns, for every policy that decided something in the window,
// its refusal ratio and its top tenants by refusals (at most top; zero
// means 10). Policies are sorted by name.
func (r *Recorder) Report(top int) Report {
	if top <= 0 {
		top = 10
	}
	now := r.opts.clock.Now().UnixNano()/r.width + 1
	oldest := now - int64(r.cfg.Buckets) + 1
	r.mu.RLock()
	names := make([]string, 0, len(r.policies))
	for n := range r.policies {
		names = append(names, n)
	}
	r.mu.RUnlock()
	slices.Sort(names)
	rep := Report{Window: r.cfg.Window}
	for _, name := range names {
		r.mu.RLock()
		pw := r.policies[name]
		r.mu.RUnlock()
		pr := PolicyReport{Policy: name, Buckets: make([]BucketReport, r.cfg.Buckets)}
		for i := range pr.Buckets {
			pr.Buckets[i].Start = time.Unix(0, (oldest+int64(i)-1)*r.width)
		}
		tenants := map[string]*counts{}
		pw.mu.Lock()
		pr.Mode = pw.mode
		for i := range pw.buckets {
			b := &pw.buckets[i]
			if b.epoch < oldest || b.epoch > now {
				continue
			}
			br := &pr.Buckets[b.epoch-oldest]
			br.Requests, br.Refused = b.total.requests, b.total.refused
			br.Ratio = ratio(br.Refused, br.Requests)
			pr.Requests += b.total.requests
			pr.Refused += b.total.refused
			for t, c := range b.tenants {
				sum := tenants[t]
				if sum == nil {
					sum = &counts{}
					tenants[t] = sum
				}
				sum.requests += c.requests
				sum.refused += c.refused
			}
		}
		pw.mu.Unlock()
		if pr.Requests == 0 {
			continue
		}
		pr.Ratio = float64(pr.Refused) / float64(pr.Requests)
		for t, c := range tenants {
			if c.refused == 0 {
				continue
			}
			pr.Tenants = append(pr.Tenants, TenantReport{
				Tenant: t, Requests: c.requests, Refused: c.refused,
				Ratio: float64(c.refused) / float64(c.requests),
				Share: float64(c.refused) / float64(pr.Refused),
			})
		}
		slices.SortFunc(pr.Tenants, func(a, b TenantReport) int {
			if c := cmp.Compare(b.Refused, a.Refused); c != 0 {
				return c
			}
			return strings.Compare(a.Tenant, b.Tenant)
		})
		pr.Tenants = pr.Tenants[:min(top, len(pr.Tenants))]
		rep.Policies = append(rep.Policies, pr)
	}
	return rep
}

// String describes each policy in one sentence, for a CLI or a status page.
func (rep Report) String() string {
	var b strings.Builder
	for _, p := range rep.Policies {
		verb := "rejected"
		if p.Mode == limits.Shadow {
			b.WriteString("if enforced now, ")
			verb = "would reject"
		}
		fmt.Fprintf(&b, "policy %s %s %.1f%% of requests (%d of %d) over the last %v",
			p.Policy, verb, 100*p.Ratio, p.Refused, p.Requests, rep.Window)
		if len(p.Tenants) > 0 {
			t := p.Tenants[0]
			fmt.Fprintf(&b, ", %.0f%% of them from tenant %s", 100*t.Share, t.Tenant)
		}
		b.WriteString("\n")
	}
	return b.String()
}

var _ admission.Observer = (*Recorder)(nil)
