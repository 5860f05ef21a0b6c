package main

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

// TestBurstAllowed: a fixed window of limit per minute allows limit in
// every window the burst touched, windows aligned to the Unix epoch.
func TestBurstAllowed(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		start, end string
		want       int
	}{
		{"2026-12-01T10:00:01Z", "2026-12-01T10:00:03Z", 500},
		{"2026-12-01T10:00:59.5Z", "2026-12-01T10:01:01.5Z", 1000},
		{"2026-12-01T10:00:00Z", "2026-12-01T10:00:59.999Z", 500},
		{"2026-12-01T10:00:30Z", "2026-12-01T10:02:00Z", 1500},
	} {
		b := burst{start: at(c.start), end: at(c.end), admitted: 600}
		if got := b.allowed(500); got != c.want {
			t.Errorf("%s..%s: allowed %d; want %d", c.start, c.end, got, c.want)
		}
		if got, want := b.ratio(500), 600/float64(c.want); got != want {
			t.Errorf("%s..%s: ratio %v; want %v", c.start, c.end, got, want)
		}
	}
}

// TestSamplesRow: a row's figures are the medians of the rounds, its
// ratio the median of the rounds' ratios, and the target is judged on
// the ratio in its direction.
func TestSamplesRow(t *testing.T) {
	var s samples
	s.add(100, 200) // 0.5
	s.add(300, 100) // 3
	s.add(90, 100)  // 0.9
	r := s.row("rls", "calls/s", "calls/s", nameRLS, nameReference, target{Bound: 1})
	if r.SluiceAt != 100 || r.PeerAt != 100 || r.Ratio != 0.9 || r.Met == nil || *r.Met || r.Target != "≥ 1" {
		t.Errorf("row = %+v (met %v); want sluice 100, peer 100, ratio 0.9, target ≥ 1 not met", r, r.Met)
	}
	r = s.row("rls", "cpu", "µs", nameRLS, nameReference, target{AtMost: true, Bound: 1})
	if r.Met == nil || !*r.Met || r.Target != "≤ 1" {
		t.Errorf("at most 1 with ratio 0.9: met %v, target %q; want met", r.Met, r.Target)
	}
	r = s.row("gateway", "p50", "ms", nameGateway, nameRP, target{})
	if r.Met != nil || r.Target != "" {
		t.Errorf("no target: met %v, target %q", r.Met, r.Target)
	}
	var zero samples
	zero.add(5, 0)
	if r := zero.row("x", "y", "", "a", "b", target{Bound: 1}); r.Met != nil || len(r.Runs) != 0 {
		t.Errorf("a peer of 0 has no ratio: %+v", r)
	}
}

// TestReportWrite: the JSON reads back as written, and the chart is
// well-formed XML with a bar per row and the rows' text escaped.
func TestReportWrite(t *testing.T) {
	met, unmet := true, false
	rep := &governedReport{GoVersion: "go1", GOMAXPROCS: 2, Rounds: 3, Interval: "5s", Reference: referenceModule, Rows: []governedRow{
		{Part: "gateway", Measure: "max requests/s <64 connections>", Ratio: 0.8, Target: "≥ 0.7", Met: &met, SluiceAt: 8, PeerAt: 10},
		{Part: "rls", Measure: "calls/s & more", Ratio: 4, Target: "≥ 1", Met: &unmet},
		{Part: "overshoot", Measure: "admitted ÷ allowed", Ratio: 1},
	}}
	dir := t.TempDir()
	if err := rep.write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "governed.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back governedReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 3 || back.Rows[0].Measure != rep.Rows[0].Measure || *back.Rows[1].Met || back.Reference != referenceModule {
		t.Errorf("JSON read back: %+v", back)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "governed.svg"))
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("governed.svg is not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects != 3 {
		t.Errorf("%d bars; want 3", rects)
	}
	if !strings.Contains(string(svg), "&lt;64 connections&gt;") {
		t.Error("a row's text is not escaped in the chart")
	}
}

// TestGovernedPolicy: the governed gateway's file has the load test's
// three policies and the spend quota and shadow candidate besides, and
// parses.
func TestGovernedPolicy(t *testing.T) {
	f, err := config.Parse("governed", []byte(governedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range f.Config.Policies {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "rpm,tpm,concurrency,spend,tpm-candidate" {
		t.Errorf("policies %s; want rpm,tpm,concurrency,spend,tpm-candidate", got)
	}
}
