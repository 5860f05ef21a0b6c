package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// A column of the replay table: its header and its cell in a candidate's
// row and in a policy's row.
type column struct {
	name   string
	cand   func(c *CandidateReport) string
	policy func(p *Policy) string
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func dash(*CandidateReport) string { return "-" }

// columns are the table's columns for the report: the refused tokens and
// cost only when some record estimates them.
func (rep *Report) columns() []column {
	cols := []column{
		{"POLICY", func(*CandidateReport) string { return "*" }, func(p *Policy) string { return p.Policy }},
		{"MODE", dash, func(p *Policy) string { return p.Mode.String() }},
		{"MATCHED", func(c *CandidateReport) string { return itoa(c.Requests) }, func(p *Policy) string { return itoa(p.Requests) }},
		{"ADMITTED", func(c *CandidateReport) string { return itoa(c.Admitted) }, func(p *Policy) string { return itoa(p.Admitted) }},
		{"REJECTED", func(c *CandidateReport) string { return itoa(c.Rejected) }, func(p *Policy) string { return itoa(p.Rejected) }},
		{"WOULD_REJECT", func(c *CandidateReport) string { return itoa(c.WouldRejected) }, func(p *Policy) string { return itoa(p.WouldReject) }},
		{"REFUSED%", func(c *CandidateReport) string { return percent(c.RejectedRatio + c.WouldRejectedRatio) },
			func(p *Policy) string { return percent(p.RejectedRatio + p.WouldRejectRatio) }},
	}
	if rep.TokensEstimated {
		cols = append(cols, column{"REFUSED_TOKENS", dash, func(p *Policy) string { return itoa(p.RefusedCost.Tokens) }})
	}
	if rep.CostEstimated {
		cols = append(cols, column{"REFUSED_COST", dash, func(p *Policy) string { return itoa(p.RefusedCost.Cost) }})
	}
	return append(cols, column{"PEAK_IN_FLIGHT", func(c *CandidateReport) string { return itoa(c.PeakInFlight) },
		func(p *Policy) string { return itoa(p.PeakInFlight) }})
}

// WriteText writes the report as a comparison table: one row per
// candidate (its overall verdict) followed by one row per policy, then
// each policy's top tenants by refusals. The first line gives the records
// replayed, and the records out of time order, the malformed lines
// skipped and the log's sampling when there are any. The REFUSED_TOKENS and REFUSED_COST
// columns are left out when no record estimates that unit
// (TokensEstimated, CostEstimated), and a line under the table says so.
func (rep Report) WriteText(w io.Writer) error {
	span := rep.End.Sub(rep.Start).Round(time.Millisecond)
	fmt.Fprintf(w, "replayed %d requests over %s through %d candidate(s)", rep.Records, span, len(rep.Candidates))
	if rep.Reordered > 0 {
		fmt.Fprintf(w, "; %d records out of time order (up to %s late) were replayed at the time before them", rep.Reordered, rep.Lateness)
	}
	if rep.Skipped > 0 {
		fmt.Fprintf(w, "; %d malformed line(s) skipped", rep.Skipped)
	}
	if rep.SampleTenants > 1 {
		fmt.Fprintf(w, "; the log holds 1 in %d tenants: the figures are theirs", rep.SampleTenants)
	}
	fmt.Fprint(w, "\n\n")
	cols := rep.columns()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cells := make([]string, 0, 1+len(cols))
	row := func(first string, cell func(column) string) {
		cells = append(cells[:0], first)
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
	if !rep.TokensEstimated {
		none = append(none, "tokens")
	}
	if !rep.CostEstimated {
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
			if len(p.Tenants) == 0 {
				continue
			}
			if !header {
				fmt.Fprint(w, "\ntop tenants by refusals (refused of their requests, share of the policy's refusals):\n")
				header = true
			}
			var b strings.Builder
			for i, t := range p.Tenants {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(t.Tenant + " " + itoa(t.Rejected+t.WouldReject))
				if t.Requests > 0 {
					b.WriteString("/" + itoa(t.Requests))
				}
				b.WriteString(" (" + percent(t.Share) + ")")
			}
			if _, err := fmt.Fprintf(w, "  %s %s: %s\n", c.Candidate, p.Policy, b.String()); err != nil {
				return err
			}
		}
	}
	return nil
}

func percent(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + "%" }
