package status

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/internal/chart"
)

// Defaults and bounds of a Page.
const (
	// DefaultRefresh is how often the status page reloads itself.
	DefaultRefresh = 5 * time.Second
	// DefaultTop is how many tenants the page lists per policy.
	DefaultTop = 5
	// DefaultReloads is how many reloads the page remembers.
	DefaultReloads = 10
	// maxStatusPolicies and maxStatusStores bound the names a Page
	// keeps figures for (a configuration has far fewer); events of
	// others are not counted.
	maxStatusPolicies = 256
	maxStatusStores   = 64
	// maxStatusText bounds an error message the page shows.
	maxStatusText = 200
)

// Config configures a Page.
type Config struct {
	// Stats returns the controller's policies (Controller.Stats); it may
	// refer to a controller created after the page, which observes it.
	Stats func() []admission.PolicyStats
	// Threshold is the rollout threshold drawn on the shadow policies'
	// charts; zero means shadow.DefaultThreshold.
	Threshold float64
	// Refresh is how often the page reloads; zero means
	// DefaultRefresh.
	Refresh time.Duration
	// Top is how many tenants are listed per policy; zero means
	// DefaultTop.
	Top int
	// Reloads is how many configuration reloads the page lists; zero
	// means DefaultReloads.
	Reloads int
	// Window and Buckets size the page's own ring of per-interval figures
	// (queue waits, fail-opens, store errors); zero means shadow.DefaultWindow
	// and shadow.DefaultBuckets, the Recorder's.
	Window  time.Duration
	Buckets int
	// HashSessions shows sessions by their pseudonym
	// (apikey.HashSession), as the logs write them with
	// logging.sessions: hash.
	HashSessions bool
}

// An Option sets an optional collaborator of a Page.
type Option func(*Page)

// WithRecorder gives the page the last window's refusals per policy,
// their tenants and the ratio over time from r (the same Recorder that
// serves /debug/rollout); nil means none: the page shows current use only.
func WithRecorder(r *shadow.Recorder) Option {
	return func(p *Page) { p.recorder = r }
}

// WithClock sets the page's clock; nil means admission.SystemClock, the
// default.
func WithClock(c admission.Clock) Option {
	return func(p *Page) {
		if c != nil {
			p.clock = c
		}
	}
}

// A Page is the operator's live view of a controller: every policy
// with its mode, algorithm, limit and current use, the tenants it refuses
// or would refuse, the shadow policies' would-reject ratio over the last
// window against the rollout threshold, queue depth and waits, store
// health and fail-open counts, and the last configuration reloads. It is
// an http.Handler serving the page as HTML (text first, inline SVG, no
// external assets, reloading itself every few seconds) and as JSON when
// the path ends in ".json" or the query has format=json: mount it at
// /status and /status.json on the operator listener, never on the
// tenants'.
//
// It is also an admission.Observer (shadow.Join it with the others): it counts,
// in a ring of per-interval figures, queue waits, fail-opens and store
// errors, and follows the agent sessions of the policies keyed by session
// (their spend) and of the loop policies (their loop refusals, with the
// step repeated). Memory is bounded: the ring, a fixed number of
// policies, stores and sessions per policy, the Recorder's own bounds,
// and the last reloads.
type Page struct {
	admission.NopObserver
	cfg      Config
	clock    admission.Clock
	recorder *shadow.Recorder
	width    int64 // ring bucket width in nanoseconds

	mu       sync.Mutex
	policies map[string]*statusRing
	sessions map[string]*followed[Session] // per policy keyed by session
	loops    map[string]*followed[Loop]    // per loop policy
	stores   map[string]*storeStatus
	reloads  []Reload
}

// statusRing holds one policy's per-interval figures.
type statusRing struct{ b []statusBucket }

type statusBucket struct {
	epoch                     int64
	waited, timeouts          int64
	waitSum, waitMax          time.Duration
	failOpen, failedClosed    int64
	storeErrors, localLimiter int64
}

type storeStatus struct {
	errors    []int64 // per ring bucket, by epoch % len
	epochs    []int64
	total     int64
	lastAt    time.Time
	lastError string
}

// States of a Reload.
const (
	// ReloadApplied is a configuration installed whole.
	ReloadApplied = "applied"
	// ReloadPartial is a configuration installed without a part of it
	// (a *reload.PartialError): Warning says which and why.
	ReloadPartial = "partial"
	// ReloadRefused is a configuration refused: the previous one stays in
	// force, and Error says why.
	ReloadRefused = "refused"
)

// A Reload is one attempt to load a new configuration.
type Reload struct {
	// Time is when it happened.
	Time time.Time `json:"time"`
	// State is ReloadApplied, ReloadPartial or ReloadRefused.
	State string `json:"state"`
	// OK is whether the configuration was installed, whole or partly;
	// Error says why not (at most 200 bytes).
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Warning says what a configuration installed partly left out, and
	// why (at most 200 bytes).
	Warning string `json:"warning,omitempty"`
	// Source names what was loaded (a file), when known.
	Source string `json:"source,omitempty"`
}

// NewPage returns a status page of the controller cfg.Stats
// describes.
func NewPage(cfg Config, opts ...Option) (*Page, error) {
	cfg.Threshold = cmp.Or(cfg.Threshold, shadow.DefaultThreshold)
	cfg.Refresh = cmp.Or(cfg.Refresh, DefaultRefresh)
	cfg.Top = cmp.Or(cfg.Top, DefaultTop)
	cfg.Reloads = cmp.Or(cfg.Reloads, DefaultReloads)
	cfg.Window = cmp.Or(cfg.Window, shadow.DefaultWindow)
	cfg.Buckets = cmp.Or(cfg.Buckets, shadow.DefaultBuckets)
	var errs []error
	if cfg.Stats == nil {
		errs = append(errs, errors.New("shadow: status page: no Stats"))
	}
	if cfg.Threshold < 0 || cfg.Threshold >= 1 {
		errs = append(errs, fmt.Errorf("shadow: status page: threshold must be in (0, 1), got %g", cfg.Threshold))
	}
	if cfg.Refresh < time.Second || cfg.Top < 0 || cfg.Reloads < 0 || cfg.Window < 0 || cfg.Buckets < 0 {
		errs = append(errs, errors.New("shadow: status page: refresh must be >= 1s, top, reloads, window and buckets > 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := &Page{
		cfg: cfg, clock: admission.SystemClock{}, width: max(int64(cfg.Window)/int64(cfg.Buckets), 1),
		policies: map[string]*statusRing{}, sessions: map[string]*followed[Session]{}, loops: map[string]*followed[Loop]{}, stores: map[string]*storeStatus{},
	}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// epoch returns the ring slot number of now.
func (p *Page) epoch() int64 { return p.clock.Now().UnixNano()/p.width + 1 }

// bucket returns policy's current ring bucket, or nil past the bound of
// policies. Callers hold p.mu.
func (p *Page) bucket(policy string) *statusBucket {
	r := p.policies[policy]
	if r == nil {
		if len(p.policies) >= maxStatusPolicies {
			return nil
		}
		r = &statusRing{b: make([]statusBucket, p.cfg.Buckets)}
		p.policies[strings.Clone(policy)] = r
	}
	e := p.epoch()
	b := &r.b[e%int64(len(r.b))]
	if b.epoch != e {
		*b = statusBucket{epoch: e}
	}
	return b
}

// Decision counts queue waits and fail-open and fail-closed decisions,
// and follows the sessions loop policies refuse.
func (p *Page) Decision(d *admission.Decision) {
	if d.Reason == admission.ReasonLoop && d.Session != "" && (d.Outcome == admission.Rejected || d.Outcome == admission.WouldReject) {
		p.loop(d)
		return
	}
	switch d.Outcome {
	case admission.Admitted, admission.Timeout, admission.FailOpen, admission.FailClosed:
	default:
		return
	}
	if d.Outcome == admission.Admitted && d.QueueWait == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.bucket(d.Policy)
	if b == nil {
		return
	}
	switch d.Outcome {
	case admission.Admitted:
		b.waited++
		b.waitSum += d.QueueWait
		b.waitMax = max(b.waitMax, d.QueueWait)
	case admission.Timeout:
		b.timeouts++
		b.waitSum += d.QueueWait
		b.waitMax = max(b.waitMax, d.QueueWait)
	case admission.FailOpen:
		b.failOpen++
	case admission.FailClosed:
		b.failedClosed++
	}
}

// StoreError counts a store failure, per policy and per store.
func (p *Page) StoreError(e admission.StoreEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.bucket(e.Policy); b != nil {
		b.storeErrors++
		if e.Action == limits.FailLocalMode {
			b.localLimiter++
		}
	}
	name := cmp.Or(e.Store, "memory")
	s := p.stores[name]
	if s == nil {
		if len(p.stores) >= maxStatusStores {
			return
		}
		s = &storeStatus{errors: make([]int64, p.cfg.Buckets), epochs: make([]int64, p.cfg.Buckets)}
		p.stores[strings.Clone(name)] = s
	}
	ep := p.epoch()
	i := ep % int64(len(s.errors))
	if s.epochs[i] != ep {
		s.epochs[i], s.errors[i] = ep, 0
	}
	s.errors[i]++
	s.total++
	s.lastAt = p.clock.Now()
	if e.Err != nil {
		s.lastError = clip(e.Err.Error())
	}
}

// Reloaded records a configuration reload, as reload.Event reports it:
// err is nil when the new configuration was installed whole, a
// *reload.PartialError when it was installed without a part (a warning),
// and why it was refused otherwise. The policy-file package's reload hook
// (reload.OnReload) calls it with the reload's Err.
func (p *Page) Reloaded(source string, err error) {
	r := Reload{Time: p.clock.Now(), State: ReloadApplied, OK: true, Source: clip(source)}
	var partial *reload.PartialError
	switch {
	case errors.As(err, &partial):
		r.State, r.Warning = ReloadPartial, clip(err.Error())
	case err != nil:
		r.State, r.OK, r.Error = ReloadRefused, false, clip(err.Error())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reloads = append(p.reloads, r)
	if n := len(p.reloads) - p.cfg.Reloads; n > 0 {
		p.reloads = slices.Delete(p.reloads, 0, n)
	}
}

// clip bounds s to maxStatusText bytes of valid UTF-8.
func clip(s string) string {
	if len(s) <= maxStatusText {
		return s
	}
	return strings.ToValidUTF8(s[:maxStatusText], "") + "…"
}

// View is what the status page shows, its JSON form.
type View struct {
	// Time is when the figures were taken; Window how far back the
	// windowed ones look.
	Time      time.Time     `json:"time"`
	Window    time.Duration `json:"window_ns"`
	Threshold float64       `json:"threshold"`
	Policies  []Policy      `json:"policies"`
	Stores    []Store       `json:"stores"`
	Reloads   []Reload      `json:"reloads"`
}

// Policy is one policy on the status page: its Figures over the window
// (from the Recorder; zero without one, but for the policy's name, mode,
// algorithm, unit and limit, which come from Controller.Stats), its state
// now and the page's own figures over the window.
type Policy struct {
	shadow.Figures
	// InFlight is the cost concurrency permits hold; Partitions and
	// NearLimit count the partitions held and those at 80% of the limit
	// or more; Queued is the requests waiting now.
	InFlight   int64 `json:"in_flight"`
	Partitions int   `json:"partitions"`
	NearLimit  int   `json:"near_limit"`
	Queued     int   `json:"queued"`
	// Over the window: requests that waited in the queue and were
	// admitted, that timed out, the longest and mean wait.
	Waited    int64         `json:"waited"`
	Timeouts  int64         `json:"timeouts"`
	WaitMax   time.Duration `json:"wait_max_ns"`
	WaitMean  time.Duration `json:"wait_mean_ns"`
	FailOpen  int64         `json:"fail_open"`
	FailClose int64         `json:"fail_closed"`
	// StoreErrors counts failed store calls, LocalLimiter those answered
	// by the local fallback limiter.
	StoreErrors  int64 `json:"store_errors"`
	LocalLimiter int64 `json:"local_limiter"`
	// Sessions are, for a policy keyed by session, the sessions that
	// settled in the window with the most used (a session budget's
	// spend), at most Config.Top.
	Sessions []Session `json:"sessions,omitempty"`
	// Loops are, for a loop policy, the sessions it refused (or, in
	// shadow mode, would have) in the window, the most refusals first,
	// at most Config.Top.
	Loops []Loop `json:"loops,omitempty"`
}

// Store is one store's health on the status page.
type Store struct {
	Store string `json:"store"`
	// Healthy is false when the store failed in the current or the
	// previous interval of the window.
	Healthy bool `json:"healthy"`
	// Errors counts failures in the window, Total since the start.
	Errors int64 `json:"errors"`
	Total  int64 `json:"total"`
	// LastAt and LastError are the last failure's time and message.
	LastAt    time.Time `json:"last_at"`
	LastError string    `json:"last_error,omitempty"`
}

// View returns the page's figures now.
func (p *Page) View() View {
	now := p.clock.Now()
	st := View{Time: now, Window: p.cfg.Window, Threshold: p.cfg.Threshold}
	var win map[string]*shadow.Figures
	if p.recorder != nil {
		rep := p.recorder.Report(p.cfg.Top)
		win = make(map[string]*shadow.Figures, len(rep.Policies))
		for i := range rep.Policies {
			win[rep.Policies[i].Policy] = &rep.Policies[i]
		}
	}
	e := p.epoch()
	oldest := e - int64(p.cfg.Buckets) + 1
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.cfg.Stats() {
		ps := Policy{InFlight: s.InFlight, Partitions: s.Partitions, NearLimit: s.NearLimit, Queued: s.Queued}
		if w := win[s.Name]; w != nil {
			ps.Figures = *w
		}
		ps.Policy, ps.Mode, ps.Algorithm, ps.Unit, ps.Limit = s.Name, s.Mode, s.Algorithm, s.Unit, s.Limit
		if r := p.policies[s.Name]; r != nil {
			var sum time.Duration
			for _, b := range r.b {
				if b.epoch < oldest || b.epoch > e {
					continue
				}
				ps.Waited += b.waited
				ps.Timeouts += b.timeouts
				sum += b.waitSum
				ps.WaitMax = max(ps.WaitMax, b.waitMax)
				ps.FailOpen += b.failOpen
				ps.FailClose += b.failedClosed
				ps.StoreErrors += b.storeErrors
				ps.LocalLimiter += b.localLimiter
			}
			if n := ps.Waited + ps.Timeouts; n > 0 {
				ps.WaitMean = sum / time.Duration(n)
			}
		}
		if t := p.sessions[s.Name]; t != nil {
			ps.Sessions = t.top(p.cfg.Top, now.Add(-p.cfg.Window))
		}
		if t := p.loops[s.Name]; t != nil {
			ps.Loops = t.top(p.cfg.Top, now.Add(-p.cfg.Window))
		}
		st.Policies = append(st.Policies, ps)
	}
	for name, s := range p.stores {
		ss := Store{Store: name, Healthy: true, Total: s.total, LastAt: s.lastAt, LastError: s.lastError}
		for i, ep := range s.epochs {
			if ep >= oldest && ep <= e {
				ss.Errors += s.errors[i]
				if ep >= e-1 {
					ss.Healthy = false
				}
			}
		}
		st.Stores = append(st.Stores, ss)
	}
	slices.SortFunc(st.Stores, func(a, b Store) int { return cmp.Compare(a.Store, b.Store) })
	st.Reloads = slices.Clone(p.reloads)
	slices.Reverse(st.Reloads) // newest first
	return st
}

// ServeHTTP serves the page: JSON when the path ends in ".json" or the
// query says format=json, HTML otherwise.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	st := p.View()
	w.Header().Set("Cache-Control", "no-store")
	if strings.HasSuffix(r.URL.Path, ".json") || r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = st.WriteHTML(w, p.cfg.Refresh)
}

// WriteHTML writes the status as one HTML page that reloads itself every
// refresh.
func (st *View) WriteHTML(w io.Writer, refresh time.Duration) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	esc := html.EscapeString
	p("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"%d\">\n", int(refresh/time.Second))
	p("<title>Sluice status</title>\n<style>%s</style></head>\n<body>\n<h1>Sluice status</h1>\n", chart.CSS)
	p("<p class=\"summary\">At %s; the figures cover the last %s; this page reloads every %s. JSON: <code>status.json</code>.</p>\n",
		st.Time.UTC().Format(time.RFC3339), st.Window, refresh)
	p("<h2>Policies</h2>\n<table class=\"policies\"><thead><tr><th>policy</th><th>mode</th><th>algorithm</th><th>limit</th><th>in use</th><th>partitions</th><th>queued</th><th>waited</th><th>wait mean / max</th><th>timeouts</th><th>refused (window)</th><th>fail open</th><th>store errors</th></tr></thead><tbody>\n")
	for _, ps := range st.Policies {
		use := fmt.Sprintf("%d near limit", ps.NearLimit)
		if ps.Algorithm == limits.Concurrency {
			use = fmt.Sprintf("%d in flight", ps.InFlight)
		}
		p("<tr data-policy=\"%s\"><td>%s</td><td>%s</td><td>%s</td><td>%d %s</td><td>%s</td><td>%d</td><td class=\"queued\">%d</td><td>%d</td><td>%s / %s</td><td>%d</td><td class=\"refused\">%d of %d (%s)</td><td>%d</td><td>%d</td></tr>\n",
			esc(ps.Policy), esc(ps.Policy), ps.Mode, ps.Algorithm, ps.Limit, ps.Unit, use, ps.Partitions, ps.Queued, ps.Waited,
			ps.WaitMean.Round(time.Millisecond), ps.WaitMax.Round(time.Millisecond), ps.Timeouts, ps.Refused, ps.Requests, chart.Pct(ps.Ratio), ps.FailOpen, ps.StoreErrors)
	}
	p("</tbody></table>\n")
	// perPolicy writes a section of one table per policy that has rows
	// (n of them), headed by its name and, with verbs, what it does in
	// its mode (verbs[0] enforcing, verbs[1] in shadow); none when no
	// policy has any.
	perPolicy := func(heading, none, class, head string, verbs []string, n func(*Policy) int, row func(*Policy, int)) {
		p("<h2>%s</h2>\n", heading)
		listed := false
		for i := range st.Policies {
			ps := &st.Policies[i]
			if n(ps) == 0 {
				continue
			}
			listed = true
			title := esc(ps.Policy)
			switch {
			case len(verbs) == 2 && ps.Mode == limits.Shadow:
				title += " (" + verbs[1] + ")"
			case len(verbs) == 2:
				title += " (" + verbs[0] + ")"
			}
			p("<h3>%s</h3>\n<table class=\"%s\" data-policy=\"%s\"><thead><tr>%s</tr></thead><tbody>\n", title, class, esc(ps.Policy), head)
			for j := range n(ps) {
				row(ps, j)
			}
			p("</tbody></table>\n")
		}
		if !listed {
			p("<p class=\"none\">%s</p>\n", none)
		}
	}
	perPolicy("Refused tenants", "No tenant refused in the window.", "tenants",
		"<th>tenant</th><th>requests</th><th>refused</th><th>of their requests</th><th>share of refusals</th>", []string{"rejected", "would reject"},
		func(ps *Policy) int { return len(ps.Tenants) },
		func(ps *Policy, i int) {
			t := ps.Tenants[i]
			p("<tr data-tenant=\"%s\"><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
				esc(t.Tenant), esc(t.Tenant), t.Requests, t.Refused, chart.Pct(t.Ratio), chart.Pct(t.Share))
		})
	perPolicy("Top sessions by spend", "No session settled in the window under a policy keyed by session.", "sessions",
		"<th>tenant</th><th>session</th><th>used</th><th>of</th><th>last settled</th>", nil,
		func(ps *Policy) int { return len(ps.Sessions) },
		func(ps *Policy, i int) {
			s := ps.Sessions[i]
			p("<tr data-session=\"%s\"><td>%s</td><td>%s</td><td>%d %s</td><td>%d (%s)</td><td>%s</td></tr>\n",
				esc(s.Session), esc(s.Tenant), esc(s.Session), s.Used, ps.Unit, s.Limit, chart.Pct(float64(s.Used)/float64(s.Limit)), s.Updated.UTC().Format(time.RFC3339))
		})
	perPolicy("Loop refusals by session", "No session refused as a loop in the window.", "loops",
		"<th>tenant</th><th>session</th><th>refusals</th><th>step repeated</th><th>more than</th><th>last</th>", []string{"refused", "would refuse"},
		func(ps *Policy) int { return len(ps.Loops) },
		func(ps *Policy, i int) {
			l := ps.Loops[i]
			p("<tr data-session=\"%s\"><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%d within %s</td><td>%s</td></tr>\n",
				esc(l.Session), esc(l.Tenant), esc(l.Session), l.Refusals, esc(l.Step), l.Limit, l.Window, l.Updated.UTC().Format(time.RFC3339))
		})
	p("<h2>Shadow policies: would-reject ratio</h2>\n<div class=\"side\">\n")
	shadowSeen := false
	for _, ps := range st.Policies {
		if ps.Mode != limits.Shadow || len(ps.Buckets) == 0 {
			continue
		}
		shadowSeen = true
		share := make([]float64, len(ps.Buckets))
		top := st.Threshold * 2
		for i, b := range ps.Buckets {
			share[i] = b.Ratio
			top = max(top, b.Ratio)
		}
		step := st.Window / time.Duration(len(ps.Buckets))
		p("<div class=\"cell\" data-policy=\"%s\"><h3>%s</h3>\n<p class=\"figures\">would reject %d of %d (%s) over the last %s; threshold %s</p>\n",
			esc(ps.Policy), esc(ps.Policy), ps.Refused, ps.Requests, chart.Pct(ps.Ratio), st.Window, chart.Pct(st.Threshold))
		chart.WriteRatio(bw, chart.Axis{Start: ps.Buckets[0].Start, Step: step, N: len(ps.Buckets)}, share, min(top, 1), st.Threshold)
		p("</div>\n")
	}
	if !shadowSeen {
		p("<p class=\"none\">No shadow policy decided in the window.</p>\n")
	}
	p("</div>\n<h2>Stores</h2>\n")
	if len(st.Stores) == 0 {
		p("<p class=\"none\">No store failed since the start.</p>\n")
	} else {
		p("<table class=\"stores\"><thead><tr><th>store</th><th>health</th><th>errors (window)</th><th>errors (total)</th><th>last error</th></tr></thead><tbody>\n")
		for _, s := range st.Stores {
			health := "ok"
			if !s.Healthy {
				health = "failing"
			}
			p("<tr data-store=\"%s\"><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%s %s</td></tr>\n",
				esc(s.Store), esc(s.Store), health, s.Errors, s.Total, s.LastAt.UTC().Format(time.RFC3339), esc(s.LastError))
		}
		p("</tbody></table>\n")
	}
	p("<h2>Reloads</h2>\n")
	if len(st.Reloads) == 0 {
		p("<p class=\"none\">No reload since the start.</p>\n")
	} else {
		p("<table class=\"reloads\"><thead><tr><th>time</th><th>source</th><th>result</th></tr></thead><tbody>\n")
		for _, r := range st.Reloads {
			result := "installed"
			switch r.State {
			case ReloadPartial:
				result = "installed, with a warning: " + r.Warning
			case ReloadRefused:
				result = "refused: " + r.Error
			}
			p("<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", r.Time.UTC().Format(time.RFC3339), esc(r.Source), esc(result))
		}
		p("</tbody></table>\n")
	}
	p("<script>%s</script>\n</body></html>\n", chart.JS)
	return bw.Flush()
}
