package replay

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/internal/chart"
)

// HTMLOptions configures Report.WriteHTML.
type HTMLOptions struct {
	// Title heads the page; empty means "What-if report".
	Title string
	// Threshold is the refused share drawn on the ratio charts: the share
	// of a policy's requests it may reject before it hurts (the rollout
	// threshold). Zero means shadow.DefaultThreshold.
	Threshold float64
	// Suggestions, when set, are shown under each candidate's policies
	// (see Suggest).
	Suggestions []Suggestion
}

// Colours and captions of the charts.
const (
	otherColor      = "#9e9e9e"
	admittedCaption = "admitted per bucket, by tenant"
)

// palette colours the top tenants of a chart, in order.
var palette = [SeriesTenants]string{"#1976d2", "#ef6c00", "#388e3c", "#8e24aa", "#00838f"}

// WriteHTML writes the report as one self-contained HTML page (inline CSS,
// inline SVG, a few lines of inline script; nothing fetched): for each
// policy, its candidates side by side on the same axes, each with its
// admitted and refused requests over time as areas stacked by tenant (the
// top tenants by refusals, then shadow.OtherTenant), its refused share over time
// against the threshold, and its top tenants' table. Every figure is also
// text (captions, tables, each area's title and data-values), so the page
// reads in a terminal browser and tests can check its numbers.
func (rep Report) WriteHTML(w io.Writer, opt HTMLOptions) error {
	if opt.Title == "" {
		opt.Title = "What-if report"
	}
	if opt.Threshold == 0 {
		opt.Threshold = shadow.DefaultThreshold
	}
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	esc := html.EscapeString
	p("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	p("<title>%s</title>\n<style>%s</style></head>\n<body>\n<h1>%s</h1>\n", esc(opt.Title), chart.CSS, esc(opt.Title))
	p("<p class=\"summary\">Replayed <b>%d</b> requests from %s to %s (%s) through %d candidate(s); buckets of %s.",
		rep.Records, rep.Start.UTC().Format(time.RFC3339), rep.End.UTC().Format(time.RFC3339),
		rep.End.Sub(rep.Start).Round(time.Millisecond), len(rep.Candidates), seriesStep(&rep))
	if rep.SampleTenants > 1 {
		p(" The log holds 1 in %d tenants: the figures are theirs.", rep.SampleTenants)
	}
	if rep.Reordered > 0 {
		p(" %d records out of time order were replayed at the time before them.", rep.Reordered)
	}
	p("</p>\n")

	// The verdicts side by side.
	p("<h2>Candidates</h2>\n<table class=\"candidates\"><thead><tr><th>candidate</th><th>policy</th><th>mode</th><th>algorithm</th><th>limit</th><th>matched</th><th>admitted</th><th>rejected</th><th>would reject</th><th>refused share</th></tr></thead><tbody>\n")
	for _, c := range rep.Candidates {
		p("<tr class=\"verdict\" data-candidate=\"%s\"><td>%s</td><td>*</td><td></td><td></td><td></td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n",
			esc(c.Candidate), esc(c.Candidate), c.Requests, c.Admitted, c.Rejected, c.WouldRejected, chart.Pct(shadow.Ratio(c.Rejected+c.WouldRejected, c.Requests)))
		for _, pr := range c.Policies {
			p("<tr data-candidate=\"%s\" data-policy=\"%s\"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d %s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n",
				esc(c.Candidate), esc(pr.Policy), esc(c.Candidate), esc(pr.Policy), pr.Mode, pr.Algorithm, pr.Limit, pr.Unit,
				pr.Requests, pr.Admitted, pr.Rejected, pr.WouldReject, chart.Pct(pr.RejectedRatio+pr.WouldRejectRatio))
		}
	}
	p("</tbody></table>\n")

	for _, name := range policyNames(&rep) {
		p("<section class=\"policy\" data-policy=\"%s\">\n<h2>%s</h2>\n<div class=\"side\">\n", esc(name), esc(name))
		var cells []*Policy
		var cands []string
		for i := range rep.Candidates {
			c := &rep.Candidates[i]
			for j := range c.Policies {
				if c.Policies[j].Policy == name {
					cells = append(cells, &c.Policies[j])
					cands = append(cands, c.Candidate)
				}
			}
		}
		// The same axes for every candidate of the policy.
		var admMax, refMax int64
		ratioMax := opt.Threshold * 2
		for _, pr := range cells {
			a, r, rs := seriesTotals(pr.Series)
			admMax = max(admMax, slices.Max(append(a, 1)))
			refMax = max(refMax, slices.Max(append(r, 1)))
			ratioMax = max(ratioMax, slices.Max(append(rs, 0)))
		}
		ratioMax = min(ratioMax, 1)
		for k, pr := range cells {
			p("<div class=\"cell\" data-candidate=\"%s\">\n<h3>%s</h3>\n", esc(cands[k]), esc(cands[k]))
			p("<p class=\"figures\">%s, %s, limit %d %s: matched %d, admitted %d, rejected %d, would reject %d, bypassed %d (refused %s)</p>\n",
				pr.Mode, pr.Algorithm, pr.Limit, pr.Unit, pr.Requests, pr.Admitted, pr.Rejected, pr.WouldReject, pr.Bypassed,
				chart.Pct(pr.RejectedRatio+pr.WouldRejectRatio))
			if s := pr.Series; s != nil && s.Buckets() > 0 {
				refusedWhat := "rejected"
				if pr.Mode == limits.Shadow {
					refusedWhat = "would reject"
				}
				writeStack(bw, s, "admitted", admittedCaption, admMax, func(t *TenantSeries) []int64 { return t.Admitted })
				writeStack(bw, s, "refused", refusedWhat+" per bucket, by tenant", refMax, func(t *TenantSeries) []int64 {
					out := make([]int64, len(t.Rejected))
					for i := range out {
						out[i] = t.Rejected[i] + t.WouldReject[i]
					}
					return out
				})
				_, _, rs := seriesTotals(s)
				chart.WriteRatio(bw, s.axis(), rs, ratioMax, opt.Threshold)
				writeLegend(bw, s)
			}
			writeTenants(bw, pr)
			for _, sg := range opt.Suggestions {
				if sg.Candidate == cands[k] && sg.Policy == pr.Policy {
					writeSuggestion(bw, &sg)
				}
			}
			p("</div>\n")
		}
		p("</div>\n</section>\n")
	}
	p("<script>%s</script>\n</body></html>\n", chart.JS)
	return bw.Flush()
}

// seriesStep returns the common bucket width of the report's series.
func seriesStep(rep *Report) time.Duration {
	for _, c := range rep.Candidates {
		for _, p := range c.Policies {
			if p.Series != nil {
				return p.Series.Step
			}
		}
	}
	return 0
}

// policyNames returns the policies of all candidates, first seen first.
func policyNames(rep *Report) []string {
	var names []string
	for _, c := range rep.Candidates {
		for _, p := range c.Policies {
			if !slices.Contains(names, p.Policy) {
				names = append(names, p.Policy)
			}
		}
	}
	return names
}

// axis returns the time axis of s.
func (s *Series) axis() chart.Axis { return chart.Axis{Start: s.Start, Step: s.Step, N: s.Buckets()} }

// seriesTotals returns per bucket the admitted and refused requests of
// all tenants and the refused share of those decided.
func seriesTotals(s *Series) (admitted, refused []int64, share []float64) {
	if s == nil {
		return nil, nil, nil
	}
	n := s.Buckets()
	admitted, refused, share = make([]int64, n), make([]int64, n), make([]float64, n)
	for _, t := range s.Tenants {
		for i := range n {
			admitted[i] += t.Admitted[i]
			refused[i] += t.Rejected[i] + t.WouldReject[i]
		}
	}
	for i := range n {
		share[i] = shadow.Ratio(refused[i], admitted[i]+refused[i])
	}
	return admitted, refused, share
}

// writeStack writes a stacked area chart of one count of s's tenants.
func writeStack(w io.Writer, s *Series, kind, caption string, top int64, values func(*TenantSeries) []int64) {
	n := s.Buckets()
	fmt.Fprintf(w, "<figure class=\"chart\" data-chart=\"%s\">\n<svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" aria-label=\"%s\">", kind, chart.W, chart.H, chart.W, chart.H, html.EscapeString(caption))
	chart.WriteAxes(w, s.axis(), strconv.FormatInt(top, 10))
	lower := make([]int64, n)
	for k := range s.Tenants {
		t := &s.Tenants[k]
		v := values(t)
		var total int64
		var d strings.Builder
		for i := range n {
			total += v[i]
			cmd := 'L'
			if i == 0 {
				cmd = 'M'
			}
			fmt.Fprintf(&d, "%c%s,%s", cmd, chart.Num(chart.X(i, n)), chart.Num(chart.Y(float64(lower[i]+v[i]), float64(top))))
		}
		for i := n - 1; i >= 0; i-- {
			fmt.Fprintf(&d, "L%s,%s", chart.Num(chart.X(i, n)), chart.Num(chart.Y(float64(lower[i]), float64(top))))
		}
		d.WriteString("Z")
		for i := range n {
			lower[i] += v[i]
		}
		if total == 0 {
			continue
		}
		fmt.Fprintf(w, "\n<path class=\"area\" data-tenant=\"%s\" data-values=\"%s\" d=\"%s\" fill=\"%s\" stroke=\"%s\" stroke-width=\"0.5\" fill-opacity=\"0.75\"><title>%s: %d</title></path>",
			html.EscapeString(t.Tenant), joinInts(v), d.String(), tenantColor(k, t.Tenant), tenantColor(k, t.Tenant), html.EscapeString(t.Tenant), total)
	}
	var all int64
	for _, v := range lower {
		all += v
	}
	fmt.Fprintf(w, "</svg>\n<figcaption>%s: <span class=\"total\">%d</span> in all</figcaption></figure>\n", html.EscapeString(caption), all)
}

// writeLegend names the colours of the tenants.
func writeLegend(w io.Writer, s *Series) {
	fmt.Fprint(w, `<ul class="legend">`)
	for k, t := range s.Tenants {
		fmt.Fprintf(w, `<li><span class="swatch" style="background:%s"></span>%s</li>`, tenantColor(k, t.Tenant), html.EscapeString(t.Tenant))
	}
	fmt.Fprint(w, "</ul>\n")
}

// writeTenants writes the policy's top tenants by refusals.
func writeTenants(w io.Writer, pr *Policy) {
	if len(pr.Tenants) == 0 {
		fmt.Fprint(w, "<p class=\"none\">No tenant refused.</p>\n")
		return
	}
	fmt.Fprint(w, "<table class=\"tenants\"><thead><tr><th>tenant</th><th>requests</th><th>rejected</th><th>would reject</th><th>share of refusals</th></tr></thead><tbody>\n")
	for _, t := range pr.Tenants {
		fmt.Fprintf(w, "<tr data-tenant=\"%s\"><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n",
			html.EscapeString(t.Tenant), html.EscapeString(t.Tenant), t.Requests, t.Rejected, t.WouldReject, chart.Pct(t.Share))
	}
	fmt.Fprint(w, "</tbody></table>\n")
}

func tenantColor(k int, tenant string) string {
	if tenant == shadow.OtherTenant || k >= len(palette) {
		return otherColor
	}
	return palette[k]
}

func joinInts(v []int64) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	return b.String()
}

// writeSuggestion writes a policy's suggested limit and its YAML.
func writeSuggestion(w io.Writer, s *Suggestion) {
	fmt.Fprintf(w, "<div class=\"suggestion\" data-limit=\"%d\" data-burst=\"%d\">\n", s.Limit, s.Burst)
	if !s.Reached {
		fmt.Fprintf(w, "<p>No limit keeps the rejected share of %s at or under %s.</p></div>\n", html.EscapeString(s.Policy), chart.Pct(s.Target))
		return
	}
	fmt.Fprintf(w, "<p>Suggested: limit <b>%d</b> %s", s.Limit, s.Unit)
	if s.Burst > 0 {
		fmt.Fprintf(w, ", burst <b>%d</b>", s.Burst)
	}
	fmt.Fprintf(w, " (now %d): enforced alone it rejects %d of %d (%s, target %s; %d with today's limit)",
		s.WasLimit, s.Rejected, s.Matched, chart.Pct(s.Share), chart.Pct(s.Target), s.WasRejected)
	if len(s.Ignored) > 0 {
		fmt.Fprintf(w, ", leaving out %s", html.EscapeString(strings.Join(s.Ignored, ", ")))
	}
	fmt.Fprintf(w, ".</p>\n<pre class=\"yaml\">%s</pre></div>\n", html.EscapeString(s.YAML()))
}
