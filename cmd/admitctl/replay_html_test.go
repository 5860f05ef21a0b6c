package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/shadow/replay"
)

var (
	cellRE     = regexp.MustCompile(`<div class="cell" data-candidate="([^"]*)">`)
	chartRE    = regexp.MustCompile(`(?s)<figure class="chart" data-chart="(\w+)">(.*?)</figure>`)
	areaRE     = regexp.MustCompile(`<path class="area" data-tenant="([^"]*)" data-values="([^"]*)"`)
	ratioRE    = regexp.MustCompile(`<polyline class="ratio" data-values="([^"]*)"`)
	pointRE    = regexp.MustCompile(`<circle class="point"`)
	thresholdR = regexp.MustCompile(`<line class="threshold" data-value="([^"]*)"`)
	tenantRow  = regexp.MustCompile(`<tr data-tenant="([^"]*)"><td>[^<]*</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>`)
	suggestRE  = regexp.MustCompile(`<div class="suggestion" data-limit="(\d+)" data-burst="(\d+)">`)
)

func sumValues(t *testing.T, s string) (int64, int) {
	t.Helper()
	var sum int64
	f := strings.Fields(s)
	for _, v := range f {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("data-values %q: %v", s, err)
		}
		sum += n
	}
	return sum, len(f)
}

// The HTML report of the example log holds the replay's figures: per
// candidate and policy, the charts' areas add up to its admitted and
// refused requests, the ratio line has a point per bucket on the same
// axis for every candidate, the tenant table is the report's, and the
// suggestions are those of --format json.
func TestReplayHTMLFigures(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report.html")
	args := []string{"replay", "--log", sampleLog, "--config", current, "--config", candidate, "--suggest", "--html", out}
	code, stdout, errs := runArgs("", append(args, "--format", "json")...)
	if code != 0 {
		t.Fatalf("replay --html = %d; stderr:\n%s", code, errs)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, external := range []string{"<link", " src=", "@import", "url(", "http://", "https://"} {
		if strings.Contains(page, external) {
			t.Errorf("the report is not self-contained: it has %q", external)
		}
	}
	buckets := -1
	cells := 0
	sections := strings.Split(page, `<section class="policy" data-policy="`)[1:]
	for _, sec := range sections {
		policy := sec[:strings.IndexByte(sec, '"')]
		locs := cellRE.FindAllStringSubmatchIndex(sec, -1)
		for k, loc := range locs {
			end := len(sec)
			if k+1 < len(locs) {
				end = locs[k+1][0]
			}
			cell := sec[loc[0]:end]
			cand := sec[loc[2]:loc[3]]
			pr := findPolicy(t, rep.Report, cand, policy)
			cells++
			charts := map[string]string{}
			for _, m := range chartRE.FindAllStringSubmatch(cell, -1) {
				charts[m[1]] = m[2]
			}
			var admitted, refused int64
			for _, m := range areaRE.FindAllStringSubmatch(charts["admitted"], -1) {
				n, _ := sumValues(t, m[2])
				admitted += n
			}
			for _, m := range areaRE.FindAllStringSubmatch(charts["refused"], -1) {
				n, _ := sumValues(t, m[2])
				refused += n
			}
			if admitted != pr.Admitted || refused != pr.Rejected+pr.WouldReject {
				t.Errorf("%s %s: charts admitted %d, refused %d; report %d, %d", cand, policy, admitted, refused, pr.Admitted, pr.Rejected+pr.WouldReject)
			}
			ratio := ratioRE.FindStringSubmatch(charts["ratio"])
			if ratio == nil {
				t.Fatalf("%s %s: no ratio line", cand, policy)
			}
			n := len(strings.Fields(ratio[1]))
			if buckets == -1 {
				buckets = n
			}
			if n != buckets || len(pointRE.FindAllString(charts["ratio"], -1)) != n {
				t.Errorf("%s %s: %d buckets; want %d, a point each, as the other charts", cand, policy, n, buckets)
			}
			if th := thresholdR.FindStringSubmatch(charts["ratio"]); th == nil || th[1] != "0.02" {
				t.Errorf("%s %s: threshold %v, want the default 0.02", cand, policy, th)
			}
			rows := tenantRow.FindAllStringSubmatch(cell, -1)
			if len(rows) != len(pr.Tenants) {
				t.Fatalf("%s %s: %d tenant rows, report %d", cand, policy, len(rows), len(pr.Tenants))
			}
			for i, r := range rows {
				tt := pr.Tenants[i]
				if got := strings.Join(r[1:], " "); got != fmt.Sprintf("%s %d %d %d", tt.Tenant, tt.Requests, tt.Rejected, tt.WouldReject) {
					t.Errorf("%s %s: tenant row %q, report %+v", cand, policy, got, tt)
				}
			}
			var sg *replay.Suggestion
			for i := range rep.Suggestions {
				if s := &rep.Suggestions[i]; s.Candidate == cand && s.Policy == policy {
					sg = s
				}
			}
			m := suggestRE.FindStringSubmatch(cell)
			if sg == nil || m == nil || m[1] != strconv.FormatInt(sg.Limit, 10) || m[2] != strconv.FormatInt(sg.Burst, 10) {
				t.Errorf("%s %s: suggestion in the page %v, in the report %+v", cand, policy, m, sg)
			}
		}
	}
	if cells != 5 || buckets < 20 {
		t.Errorf("%d candidate cells with %d buckets; want 5 (2 + 3 policies) over the log's 30 s", cells, buckets)
	}
	// Known figures of the example (README.md quotes them: TestREADMEReplayFigures).
	if p := findPolicy(t, rep.Report, current, "tenant-concurrency"); p.Rejected != 318 || p.Tenants[0].Tenant != "noisy" || p.Tenants[0].Rejected != 254 {
		t.Errorf("current tenant-concurrency: rejected %d, top %+v; want 318, noisy 254", p.Rejected, p.Tenants[0])
	}
	if p := findPolicy(t, rep.Report, candidate, "tenant-concurrency"); p.WouldReject != 442 {
		t.Errorf("candidate tenant-concurrency: would reject %d, want 442", p.WouldReject)
	}
}

func findPolicy(t *testing.T, rep replay.Report, cand, policy string) replay.Policy {
	t.Helper()
	for _, c := range rep.Candidates {
		for _, p := range c.Policies {
			if c.Candidate == cand && p.Policy == policy {
				return p
			}
		}
	}
	t.Fatalf("no policy %s in candidate %s", policy, cand)
	return replay.Policy{}
}

// --suggest prints, per candidate, a YAML snippet of the suggested
// limits; stdin works too (the log is kept for the replays).
func TestReplaySuggestYAML(t *testing.T) {
	log, err := os.ReadFile(sampleLog)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := runArgs(string(log), "replay", "--log", "-", "--config", current, "--suggest", "--target", "0.05", "--ignore-top", "1")
	if code != 0 {
		t.Fatalf("replay --suggest = %d; stderr:\n%s", code, errs)
	}
	_, yaml, ok := strings.Cut(out, "\n# "+current+": ")
	if !ok {
		t.Fatalf("no YAML snippet in:\n%s", out)
	}
	want := regexp.MustCompile(`^the smallest limits under which each policy, enforced alone, rejects at most 5\.0% of its requests \(leaving out noisy\)
policies:
  - name: tenant-rpm
    limit: \d+  # was 600; rejects \d+\.\d% \(\d+ of \d+\)
    burst: \d+  # was 30
  - name: tenant-concurrency
    limit: \d+  # was 8; rejects \d+\.\d% \(\d+ of \d+\)
$`)
	if !want.MatchString(yaml) {
		t.Errorf("YAML snippet:\n%s", yaml)
	}
}

// The example's queued candidate: requests over the concurrency cap wait
// in the replay's queue, so fewer are rejected than without it, and only
// for a full queue or a timeout (README.md quotes the figures: TestREADMEReplayFigures).
func TestReplayQueuedExample(t *testing.T) {
	code, out, errs := runArgs("", "replay", "--log", sampleLog, "--config", current, "--config", "../../examples/replay/queued.yaml", "--format", "json")
	if code != 0 {
		t.Fatalf("replay = %d: %s", code, errs)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	now := findPolicy(t, rep.Report, current, "tenant-concurrency")
	q := findPolicy(t, rep.Report, "../../examples/replay/queued.yaml", "tenant-concurrency")
	if now.Rejected != 318 || q.Rejected != 245 || q.Reasons["queue_full"] != 235 || q.Reasons["queue_timeout"] != 10 || q.Admitted != 729 {
		t.Errorf("queued candidate: %+v; current rejects %d", q, now.Rejected)
	}
}

// A tenant name holding a YAML line break (U+2028) cannot end the
// comment that names the tenants --ignore-top leaves out: the snippet
// still parses to the candidate's policies alone.
func TestReplaySuggestHostileIgnored(t *testing.T) {
	hostile := "x\u2028  - name: evil\u2028    limit: 1000000\u2028#"
	var lines []string
	for i := range 30 {
		lines = append(lines, rec(i%60, hostile, ""))
	}
	lines = append(lines, rec(0, "acme", ""), rec(1, "acme", ""))
	code, out, errs := runArgs("", "replay", "--log", logFile(t, lines...), "--config", current, "--suggest", "--ignore-top", "1")
	if code != 0 {
		t.Fatalf("replay --suggest = %d; stderr:\n%s", code, errs)
	}
	_, snippet, ok := strings.Cut(out, "\n# "+current+": ")
	if !ok {
		t.Fatalf("no YAML snippet in:\n%s", out)
	}
	var doc struct {
		Policies []struct {
			Name string `yaml:"name"`
		} `yaml:"policies"`
	}
	if err := yaml.Unmarshal([]byte("# "+snippet), &doc); err != nil {
		t.Fatalf("snippet does not parse: %v\n%s", err, snippet)
	}
	var names []string
	for _, p := range doc.Policies {
		names = append(names, p.Name)
	}
	if strings.Join(names, " ") != "tenant-rpm tenant-concurrency" {
		t.Errorf("snippet's policies = %q; want tenant-rpm tenant-concurrency:\n%s", names, snippet)
	}
}
