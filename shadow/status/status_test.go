package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/reload"
	"github.com/sluicehq/sluice/internal/browsertest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
	"github.com/sluicehq/sluice/shadow/status"
)

// statusRig is a controller on a virtual clock observed by a Recorder
// and a Page, the page served on loopback.
type statusRig struct {
	clk  *vclock.Clock
	ctl  *admission.Controller
	rec  *shadow.Recorder
	page *status.Page
	live *shadowtest.LiveCounts
	srv  *httptest.Server
}

func newStatusRig(t *testing.T, rcfg shadow.RecorderConfig, policies ...admission.Policy) *statusRig {
	t.Helper()
	r := &statusRig{clk: vclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)), live: shadowtest.NewLiveCounts()}
	var err error
	if r.rec, err = shadow.NewRecorder(rcfg, shadow.WithClock(r.clk)); err != nil {
		t.Fatal(err)
	}
	r.page, err = status.NewPage(status.Config{Stats: func() []admission.PolicyStats { return r.ctl.Stats() }}, status.WithRecorder(r.rec), status.WithClock(r.clk))
	if err != nil {
		t.Fatal(err)
	}
	r.ctl, err = admission.New(admission.Config{Policies: policies}, admission.WithClock(r.clk), admission.WithObserver(shadow.Join(r.rec, r.page, r.live)))
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(r.page)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *statusRig) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *statusRig) status(t *testing.T) status.View {
	t.Helper()
	code, body := r.get(t, "/status.json")
	var st status.View
	if code != 200 {
		t.Fatalf("GET /status.json = %d", code)
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return st
}

func statusPolicy(t *testing.T, st status.View, name string) status.Policy {
	t.Helper()
	for _, p := range st.Policies {
		if p.Policy == name {
			return p
		}
	}
	t.Fatalf("no policy %s in the status", name)
	return status.Policy{}
}

var statusPolicies = []admission.Policy{
	{Name: "tenant-rps", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 5, Per: time.Second, Burst: 5},
	{Name: "tenant-concurrency", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 2, Mode: limits.Shadow},
	{Name: "queued", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 2, Timeout: time.Second}, Match: limits.Match{Operations: []string{"POST /v1/batch"}}},
}

// drive sends a known mix: a noisy tenant over its rate, two others
// under it, each request holding for hold requests' time.
func (r *statusRig) drive(t *testing.T, n, hold int) {
	t.Helper()
	var held []admission.Ticket
	for i := range n {
		r.clk.Advance(50 * time.Millisecond)
		tenant := []string{"noisy", "noisy", "noisy", "acme", "globex"}[i%5]
		tk, err := r.ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant, Operation: "POST /v1/chat/completions"})
		if err == nil {
			held = append(held, tk)
		}
		if len(held) > hold {
			held[0].Done()
			held = held[1:]
		}
	}
	for _, tk := range held {
		tk.Done()
	}
}

// The page's figures under live traffic are the controller's and the
// Recorder's, queue depth and waits included; store health and reloads
// are those reported to it.
func TestStatusPageFigures(t *testing.T) {
	r := newStatusRig(t, shadow.RecorderConfig{}, statusPolicies...)
	r.drive(t, 400, 3)
	st := r.status(t)
	rep := r.rec.Report(5)
	stats := r.ctl.Stats()
	if len(st.Policies) != len(stats) {
		t.Fatalf("%d policies on the page, %d in the controller", len(st.Policies), len(stats))
	}
	for i, ps := range st.Policies {
		s := stats[i]
		if ps.Policy != s.Name || ps.Mode != s.Mode || ps.Algorithm != s.Algorithm || ps.Limit != s.Limit || ps.Partitions != s.Partitions || ps.InFlight != s.InFlight || ps.Queued != s.Queued {
			t.Errorf("policy %+v; controller %+v", ps, s)
		}
	}
	for _, name := range []string{"tenant-rps", "tenant-concurrency"} {
		ps := statusPolicy(t, st, name)
		refused := r.live.Rejected[name] + r.live.WouldReject[name]
		if ps.Refused != refused || ps.Refused == 0 || ps.Requests == 0 {
			t.Errorf("%s: refused %d of %d on the page; the controller refused %d", name, ps.Refused, ps.Requests, refused)
		}
		var want shadow.Figures
		for _, p := range rep.Policies {
			if p.Policy == name {
				want = p
			}
		}
		want.Limit = ps.Limit // the Recorder sees decisions, not the configuration
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		want = shadow.Figures{}
		if err := json.Unmarshal(b, &want); err != nil { // the page was read as JSON
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ps.Figures, want) {
			t.Errorf("%s: figures on the page\n%+v\nrecorder's\n%+v", name, ps.Figures, want)
		}
		var sum int64
		for _, b := range ps.Buckets {
			sum += b.Refused
		}
		if ps.Requests != want.Requests || sum != ps.Refused || len(ps.Buckets) != shadow.DefaultBuckets || len(ps.Tenants) == 0 || ps.Tenants[0].Tenant != "noisy" {
			t.Errorf("%s: %d requests, buckets add up to %d refused of %d, tenants %+v; recorder %+v", name, ps.Requests, sum, ps.Refused, ps.Tenants, want)
		}
	}

	// The HTML page: the same figures as text, the chart, no external
	// asset, a refresh; JSON by query too; nothing but GET.
	code, page := r.get(t, "/status")
	if code != 200 || !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) {
		t.Fatalf("GET /status = %d:\n%.500s", code, page)
	}
	for _, external := range []string{"<link", " src=", "@import", "url(", "http://", "https://"} {
		if strings.Contains(page, external) {
			t.Errorf("the status page has %q", external)
		}
	}
	rps := statusPolicy(t, r.status(t), "tenant-rps")
	row := fmt.Sprintf(`<td class="refused">%d of %d (`, rps.Refused, rps.Requests)
	if !strings.Contains(page, row) || !strings.Contains(page, `<div class="cell" data-policy="tenant-concurrency">`) || !strings.Contains(page, `<line class="threshold" data-value="0.02"`) {
		t.Errorf("the page lacks the rps row %q or the shadow policy's chart", row)
	}
	if code, body := r.get(t, "/status?format=json"); code != 200 || !json.Valid([]byte(body)) {
		t.Errorf("GET /status?format=json = %d", code)
	}
	// A request waits in the queue: depth 1, then a 300ms wait.
	batch := admission.Request{Tenant: "acme", Operation: "POST /v1/batch"}
	first, err := r.ctl.TryAdmit(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		tk, err := r.ctl.Admit(context.Background(), batch)
		if err == nil {
			tk.Done()
		}
		done <- err
	}()
	poll.Until(t, time.Second, "the second batch request to queue", func() bool { return statusPolicy(t, r.status(t), "queued").Queued == 1 })
	r.clk.Advance(300 * time.Millisecond)
	first.Done()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if q := statusPolicy(t, r.status(t), "queued"); q.Queued != 0 || q.Waited != 1 || q.WaitMax != 300*time.Millisecond || q.WaitMean != 300*time.Millisecond {
		t.Errorf("queued policy after the wait: %+v", q)
	}

	// Store health: failing now, healthy two intervals later, the errors
	// leave the window after it.
	r.page.StoreError(admission.StoreEvent{Policy: "tenant-rps", Store: "redis", Err: errors.New("dial tcp 10.0.0.1:6379: connection refused"), Action: limits.FailOpenMode})
	st = r.status(t)
	if len(st.Stores) != 1 || st.Stores[0].Healthy || st.Stores[0].Errors != 1 || !strings.Contains(st.Stores[0].LastError, "connection refused") || statusPolicy(t, st, "tenant-rps").StoreErrors != 1 {
		t.Errorf("stores after a failure: %+v", st.Stores)
	}
	r.clk.Advance(2 * time.Minute)
	if s := r.status(t).Stores[0]; !s.Healthy || s.Errors != 1 {
		t.Errorf("2 minutes later: %+v, want healthy with the error in the window", s)
	}
	r.clk.Advance(16 * time.Minute)
	if s := r.status(t).Stores[0]; !s.Healthy || s.Errors != 0 || s.Total != 1 {
		t.Errorf("16 minutes later: %+v, want healthy, no error in the window, 1 in all", s)
	}

	// Reloads: the last ones, newest first, messages bounded.
	for i := range 12 {
		r.page.Reloaded("policies.yaml", nil)
		if i == 11 {
			r.page.Reloaded("policies.yaml", errors.New("policies[0].limit: "+strings.Repeat("x", 500)))
		}
	}
	r.page.Reloaded("policies.yaml", fmt.Errorf("policies.yaml: %w", &reload.PartialError{Section: "directory", Err: errors.New("the section changed")}))
	st = r.status(t)
	if len(st.Reloads) != status.DefaultReloads || st.Reloads[1].OK || st.Reloads[1].State != status.ReloadRefused || len(st.Reloads[1].Error) > 210 ||
		!st.Reloads[2].OK || st.Reloads[2].State != status.ReloadApplied || st.Reloads[2].Warning != "" {
		t.Errorf("reloads: %d, newest %+v, %+v", len(st.Reloads), st.Reloads[1], st.Reloads[2])
	}
	// A file installed without a part is installed, with its warning.
	if p := st.Reloads[0]; !p.OK || p.State != status.ReloadPartial || p.Error != "" || p.Warning != "policies.yaml: applied without its directory section: the section changed" {
		t.Errorf("partial reload: %+v; want installed, state partial, with the warning", p)
	}

	resp, err := http.Post(r.srv.URL+"/status", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /status = %d", resp.StatusCode)
	}
}

// Many tenants and hours of traffic: the page stays the same size, the
// tenants listed are bounded, and so are the stores it tracks.
func TestStatusPageBounded(t *testing.T) {
	r := newStatusRig(t, shadow.RecorderConfig{MaxTenants: 50}, statusPolicies...)
	sizes := map[int]int{}
	for hour := 1; hour <= 3; hour++ {
		for i := range 20000 {
			r.clk.Advance(180 * time.Millisecond)
			tk, err := r.ctl.TryAdmit(context.Background(), admission.Request{Tenant: "t" + strconv.Itoa(hour*100000+i), Operation: "POST /v1/chat/completions"})
			if err == nil {
				tk.Done()
			}
		}
		for i := range 200 {
			r.page.StoreError(admission.StoreEvent{Policy: "p" + strconv.Itoa(i), Store: "store-" + strconv.Itoa(i), Err: errors.New("down")})
		}
		_, body := r.get(t, "/status.json")
		sizes[hour] = len(body)
		var st status.View
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Stores) > 64 || len(st.Policies) != len(statusPolicies) {
			t.Errorf("hour %d: %d stores, %d policies", hour, len(st.Stores), len(st.Policies))
		}
		for _, p := range st.Policies {
			if len(p.Tenants) > status.DefaultTop || (p.Requests > 0) != (len(p.Buckets) == shadow.DefaultBuckets) {
				t.Errorf("hour %d %s: %d tenants, %d buckets", hour, p.Policy, len(p.Tenants), len(p.Buckets))
			}
		}
	}
	if d := sizes[3] - sizes[1]; d > sizes[1]/10 || d < -sizes[1]/10 {
		t.Errorf("status.json grew from %d to %d bytes in two hours", sizes[1], sizes[3])
	}
}

// The status page of a running controller, in headless Chromium: the
// shadow policy's chart rendered with a point per bucket, no script
// error.
func TestStatusPageInBrowser(t *testing.T) {
	bin := browsertest.Chromium(t)
	r := newStatusRig(t, shadow.RecorderConfig{}, statusPolicies...)
	// A quarter of an hour, the requests holding longer and longer.
	for i := range 15 {
		r.drive(t, 100, 2+i/3)
		r.clk.Advance(55 * time.Second)
	}
	dom, log := browsertest.Headless(t, bin, r.srv.URL+"/status", "--dump-dom")
	if m := browsertest.Console(log); len(m) > 0 {
		t.Errorf("console messages:\n%s", strings.Join(m, "\n"))
	}
	rendered := regexp.MustCompile(`<body data-rendered="(\d+) charts, (\d+) points">`).FindStringSubmatch(dom)
	if rendered == nil || rendered[1] != "1" || rendered[2] != strconv.Itoa(shadow.DefaultBuckets) {
		t.Errorf("rendered %v, want 1 chart of %d points:\n%.1500s", rendered, shadow.DefaultBuckets, dom)
	}
	// scripts/screenshots.sh sets SLUICE_SCREENSHOT_DIR to keep the
	// picture for the README.
	dir := os.Getenv("SLUICE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "status-page.png")
	browsertest.Headless(t, bin, r.srv.URL+"/status", "--window-size=1200,1000", "--screenshot="+shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10000 {
		t.Errorf("screenshot: %v, %v", fi, err)
	}
}
