package shadow

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/tenantname"
)

// Defaults of RecorderConfig.
const (
	DefaultWindow  = 15 * time.Minute
	DefaultBuckets = 15
	// DefaultMaxTenants bounds the tenants tracked per policy and bucket;
	// later ones are counted as OtherTenant.
	DefaultMaxTenants = 1000
)

// DefaultThreshold is the rollout threshold the reports draw by default:
// 2% of a policy's requests refused, the threshold of the alert
// AdmissionShadowWouldRejectAboveThreshold.
const DefaultThreshold = 0.02

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
// A tenant is counted under its name, unless the name is longer than 128
// bytes, is not valid UTF-8, holds a control character or is OtherTenant:
// then under a printable prefix of it, "~" and 16 hex digits of a hash of
// the whole name (FNV-1a), as package metrics labels it.
type Recorder struct {
	admission.NopObserver
	cfg   RecorderConfig
	opts  options
	width int64 // bucket width in nanoseconds

	mu       sync.RWMutex
	policies map[string]*policyWindow
}

type policyWindow struct {
	mu        sync.Mutex
	mode      limits.Mode
	algorithm limits.Algorithm
	unit      limits.Unit
	buckets   []bucket
}

type bucket struct {
	epoch   int64 // start time / width; 0 means unused
	total   counts
	tenants map[string]*counts
}

type counts struct{ requests, rejected, would int64 }

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
	var rejected, would int64
	switch d.Outcome {
	case admission.Admitted, admission.FailOpen:
	case admission.WouldReject:
		would = 1
	case admission.Rejected, admission.Timeout, admission.FailClosed:
		rejected = 1
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
	pw.mode, pw.algorithm, pw.unit = d.Mode, d.Algorithm, d.Unit
	b := &pw.buckets[epoch%int64(len(pw.buckets))]
	if b.epoch != epoch {
		b.epoch, b.total = epoch, counts{}
		clear(b.tenants)
	}
	if b.tenants == nil {
		b.tenants = map[string]*counts{}
	}
	b.total.add(rejected, would)
	// A tenant's name, which a caller may choose, is counted as itself
	// unless it is long, not valid UTF-8, holds a control character or is
	// OtherTenant: then as a printable prefix, "~" and a hash of it, so
	// that it bounds the memory of its key and cannot break a report nor
	// pass for the overflow bucket.
	key := tenantname.Safe(d.Tenant, OtherTenant)
	c := b.tenants[key]
	if c == nil {
		key = strings.Clone(key)
		if len(b.tenants) >= r.cfg.MaxTenants {
			key = OtherTenant
		}
		if c = b.tenants[key]; c == nil {
			c = &counts{}
			b.tenants[key] = c
		}
	}
	c.add(rejected, would)
}

func (c *counts) add(rejected, would int64) {
	c.requests++
	c.rejected += rejected
	c.would += would
}

// A Report is what each policy decided over a window.
type Report struct {
	// Window is how far back the report looks.
	Window time.Duration
	// Policies are the policies that decided something in the window,
	// with their Buckets and their Tenants with refusals.
	Policies []Figures
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
		f := Figures{Policy: name, Buckets: make([]Bucket, r.cfg.Buckets)}
		for i := range f.Buckets {
			f.Buckets[i].Start = time.Unix(0, (oldest+int64(i)-1)*r.width)
		}
		tenants := map[string]*counts{}
		pw.mu.Lock()
		f.Mode, f.Algorithm, f.Unit = pw.mode, pw.algorithm, pw.unit
		for i := range pw.buckets {
			b := &pw.buckets[i]
			if b.epoch < oldest || b.epoch > now {
				continue
			}
			br := &f.Buckets[b.epoch-oldest]
			br.Requests, br.Refused = b.total.requests, b.total.rejected+b.total.would
			br.Ratio = Ratio(br.Refused, br.Requests)
			f.Requests += b.total.requests
			f.Rejected += b.total.rejected
			f.WouldReject += b.total.would
			for t, c := range b.tenants {
				sum := tenants[t]
				if sum == nil {
					sum = &counts{}
					tenants[t] = sum
				}
				sum.requests += c.requests
				sum.rejected += c.rejected
				sum.would += c.would
			}
		}
		pw.mu.Unlock()
		if f.Requests == 0 {
			continue
		}
		for t, c := range tenants {
			f.Tenants = append(f.Tenants, TenantFigures{Tenant: t, Requests: c.requests, Rejected: c.rejected, WouldReject: c.would})
		}
		f.Total(top)
		rep.Policies = append(rep.Policies, f)
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
