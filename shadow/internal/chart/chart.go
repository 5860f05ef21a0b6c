// Package chart draws the pieces the HTML reports of package shadow's
// sub-packages share (the replay's what-if report and the status page):
// their style sheet and script, the time axes and the refused-share chart
// against the rollout threshold. Every figure is also text (titles and
// data-values), so that the pages read in a terminal browser and tests can
// check their numbers.
package chart

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in SVG user units: W and H are a chart's size.
const (
	W, H           = 360, 120
	left, top      = 44, 8 // plot area's left and top margins
	right, bottom  = 8, 20
	plotW, plotH   = W - left - right, H - top - bottom
	thresholdColor = "#d32f2f"
	ratioColor     = "#1565c0"
)

// X returns the horizontal position of bucket i of n.
func X(i, n int) float64 {
	if n <= 1 {
		return left + plotW/2
	}
	return left + float64(i)*plotW/float64(n-1)
}

// Y returns the vertical position of v on an axis from 0 to max.
func Y(v, max float64) float64 {
	if max <= 0 {
		return top + plotH
	}
	return top + plotH - v/max*plotH
}

// Num formats a position with one decimal.
func Num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// An Axis is a chart's horizontal axis: N buckets of Step from Start.
type Axis struct {
	Start time.Time
	Step  time.Duration
	N     int
}

// WriteAxes writes a chart's frame, its y axis' top label and its time
// labels.
func WriteAxes(w io.Writer, ax Axis, max string) {
	end := ax.Start.Add(time.Duration(ax.N) * ax.Step)
	fmt.Fprintf(w, `<rect class="frame" x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#ccc"/>`, left, top, plotW, plotH)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text><text x="%d" y="%d" text-anchor="end">0</text>`,
		left-4, top+8, max, left-4, top+plotH)
	fmt.Fprintf(w, `<text x="%d" y="%d">%s</text><text x="%d" y="%d" text-anchor="end">%s</text>`,
		left, H-6, ax.Start.UTC().Format("15:04:05"), W-right, H-6, end.UTC().Format("15:04:05"))
}

// WriteRatio writes the refused share per bucket as a line with a point
// per bucket, against the threshold, on an axis from 0 to max.
func WriteRatio(w io.Writer, ax Axis, share []float64, max, threshold float64) {
	n := ax.N
	fmt.Fprintf(w, "<figure class=\"chart\" data-chart=\"ratio\">\n<svg viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" aria-label=\"refused share per bucket\">", W, H, W, H)
	WriteAxes(w, ax, Pct(max))
	ty := Num(Y(threshold, max))
	fmt.Fprintf(w, `<line class="threshold" data-value="%g" x1="%d" x2="%d" y1="%s" y2="%s" stroke="%s" stroke-dasharray="4 3"><title>threshold %s</title></line>`,
		threshold, left, left+plotW, ty, ty, thresholdColor, Pct(threshold))
	var pts, vals strings.Builder
	over := 0
	for i, r := range share {
		if i > 0 {
			pts.WriteByte(' ')
			vals.WriteByte(' ')
		}
		fmt.Fprintf(&pts, "%s,%s", Num(X(i, n)), Num(Y(r, max)))
		vals.WriteString(strconv.FormatFloat(r, 'f', 4, 64))
		if r > threshold {
			over++
		}
	}
	fmt.Fprintf(w, "\n<polyline class=\"ratio\" data-values=\"%s\" points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"/>", vals.String(), pts.String(), ratioColor)
	for i, r := range share {
		fmt.Fprintf(w, `<circle class="point" cx="%s" cy="%s" r="1.6" fill="%s"><title>%s: %s</title></circle>`,
			Num(X(i, n)), Num(Y(r, max)), ratioColor, ax.Start.Add(time.Duration(i)*ax.Step).UTC().Format("15:04:05"), Pct(r))
	}
	fmt.Fprintf(w, "</svg>\n<figcaption>refused share per bucket against the %s threshold: over it in <span class=\"over\">%d</span> of %d buckets</figcaption></figure>\n", Pct(threshold), over, n)
}

// Pct formats a share as a percentage with one decimal.
func Pct(r float64) string { return strconv.FormatFloat(r*100, 'f', 1, 64) + "%" }

// CSS is the reports' style sheet.
const CSS = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1em;margin:.2em 0}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee}
td:first-child,th:first-child,.candidates td:nth-child(2),.candidates th:nth-child(2){text-align:left}
.side{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:1.5em;align-items:start}
.cell p{max-width:380px}
figure{margin:.4em 0}figcaption{font-size:12px;color:#555}svg text{font-size:9px;fill:#555}
.legend{list-style:none;padding:0;margin:.2em 0;font-size:12px}.legend li{display:inline-block;margin-right:1em}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
pre.yaml{background:#f6f6f6;padding:.5em;font-size:12px}
`

// JS counts the charts' data points and marks the page rendered:
// a browser that ran it without an error sets data-rendered on <body>.
const JS = `
(function(){
  var charts = document.querySelectorAll("figure.chart svg");
  var points = 0;
  charts.forEach(function(svg){
    var n = svg.querySelectorAll("path.area, circle.point").length;
    svg.setAttribute("data-points", String(n));
    points += n;
  });
  document.body.setAttribute("data-rendered", charts.length + " charts, " + points + " points");
})();
`
