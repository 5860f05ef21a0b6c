package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/shadow"
)

// A column of the replay table: its header and its cell in a candidate's
// row and in a policy's row.
type column struct {
	name   string
	cand   func(c *shadow.CandidateReport) string
	policy func(p *shadow.PolicyReplay) string
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func percent(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + "%" }

func dash(*shadow.CandidateReport) string { return "-" }

// replayColumns are the table's columns for a log: the refused tokens and
// cost only when some record of the log estimates them.
func replayColumns(sum logSummary) []column {
	cols := []column{
		{"POLICY", func(*shadow.CandidateReport) string { return "*" }, func(p *shadow.PolicyReplay) string { return p.Policy }},
		{"MODE", dash, func(p *shadow.PolicyReplay) string { return p.Mode.String() }},
		{"MATCHED", func(c *shadow.CandidateReport) string { return itoa(c.Requests) }, func(p *shadow.PolicyReplay) string { return itoa(p.Matched) }},
		{"ADMITTED", func(c *shadow.CandidateReport) string { return itoa(c.Admitted) }, func(p *shadow.PolicyReplay) string { return itoa(p.Admitted) }},
		{"REJECTED", func(c *shadow.CandidateReport) string { return itoa(c.Rejected) }, func(p *shadow.PolicyReplay) string { return itoa(p.Rejected) }},
		{"WOULD_REJECT", func(c *shadow.CandidateReport) string { return itoa(c.WouldRejected) }, func(p *shadow.PolicyReplay) string { return itoa(p.WouldReject) }},
		{"REFUSED%", func(c *shadow.CandidateReport) string { return percent(c.RejectedRatio + c.WouldRejectedRatio) },
			func(p *shadow.PolicyReplay) string { return percent(p.RejectedRatio + p.WouldRejectRatio) }},
	}
	if sum.tokens {
		cols = append(cols, column{"REFUSED_TOKENS", dash, func(p *shadow.PolicyReplay) string { return itoa(p.RefusedCost.Tokens) }})
	}
	if sum.cost {
		cols = append(cols, column{"REFUSED_COST", dash, func(p *shadow.PolicyReplay) string { return itoa(p.RefusedCost.Cost) }})
	}
	return append(cols, column{"PEAK_IN_FLIGHT", func(c *shadow.CandidateReport) string { return itoa(c.PeakInFlight) },
		func(p *shadow.PolicyReplay) string { return itoa(p.PeakInFlight) }})
}

// writeReport writes the report as a comparison table: one row per
// candidate (its overall verdict) followed by one row per policy, then
// each policy's top tenants by refusals. Columns of units the log never
// estimates are left out, and a line under the table says so.
func writeReport(w io.Writer, rep shadow.ReplayReport, sum logSummary) error {
	span := rep.End.Sub(rep.Start).Round(time.Millisecond)
	fmt.Fprintf(w, "replayed %d requests over %s through %d candidate(s)", rep.Records, span, len(rep.Candidates))
	if rep.Reordered > 0 {
		fmt.Fprintf(w, "; %d records out of time order were replayed at the time before them", rep.Reordered)
	}
	if sum.bad > 0 {
		fmt.Fprintf(w, "; %d malformed line(s) skipped", sum.bad)
	}
	fmt.Fprint(w, "\n\n")
	cols := replayColumns(sum)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(first string, cell func(column) string) {
		cells := []string{first}
		for _, col := range cols {
			cells = append(cells, cell(col))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	row("CANDIDATE", func(col column) string { return col.name })
	for i := range rep.Candidates {
		c := &rep.Candidates[i]
		row(c.Candidate, func(col column) string { return col.cand(c) })
		for j := range c.Policies {
			p := &c.Policies[j]
			row(c.Candidate, func(col column) string { return col.policy(p) })
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var none []string
	if !sum.tokens {
		none = append(none, "tokens")
	}
	if !sum.cost {
		none = append(none, "cost")
	}
	switch {
	case rep.Records == 0:
	case len(none) == 1:
		fmt.Fprintf(w, "(no record estimates %s: its column is left out)\n", none[0])
	case len(none) == 2:
		fmt.Fprintf(w, "(no record estimates %s or %s: their columns are left out)\n", none[0], none[1])
	}
	header := false
	for _, c := range rep.Candidates {
		for _, p := range c.Policies {
			if len(p.TopTenants) == 0 {
				continue
			}
			if !header {
				fmt.Fprint(w, "\ntop tenants by refusals (refused of their requests, share of the policy's refusals):\n")
				header = true
			}
			var b strings.Builder
			for i, t := range p.TopTenants {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(t.Tenant + " " + itoa(t.Rejected+t.WouldReject))
				if t.Requests > 0 {
					b.WriteString("/" + itoa(t.Requests))
				}
				b.WriteString(" (" + percent(t.Share) + ")")
			}
			_, err := fmt.Fprintf(w, "  %s %s: %s\n", c.Candidate, p.Policy, b.String())
			if err != nil {
				return err
			}
		}
	}
	return nil
}
