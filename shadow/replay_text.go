package shadow

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes the report as a comparison table: one row per
// candidate (its overall verdict) followed by one row per policy, then
// each policy's top tenants by refusals.
func (rep ReplayReport) WriteText(w io.Writer) error {
	span := rep.End.Sub(rep.Start).Round(time.Millisecond)
	fmt.Fprintf(w, "replayed %d requests over %s through %d candidate(s)", rep.Records, span, len(rep.Candidates))
	if rep.Reordered > 0 {
		fmt.Fprintf(w, "; %d records out of time order were replayed at the time before them", rep.Reordered)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CANDIDATE\tPOLICY\tMODE\tMATCHED\tADMITTED\tREJECTED\tWOULD_REJECT\tREFUSED%\tREFUSED_TOKENS\tREFUSED_COST\tPEAK_IN_FLIGHT")
	for _, c := range rep.Candidates {
		fmt.Fprintf(tw, "%s\t*\t-\t%d\t%d\t%d\t%d\t%s\t-\t-\t%d\n", c.Candidate, c.Requests, c.Admitted, c.Rejected,
			c.WouldRejected, percent(c.RejectedRatio+c.WouldRejectedRatio), c.PeakInFlight)
		for _, p := range c.Policies {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n", c.Candidate, p.Policy, p.Mode, p.Matched, p.Admitted,
				p.Rejected, p.WouldReject, percent(p.RejectedRatio+p.WouldRejectRatio), p.RefusedCost.Tokens, p.RefusedCost.Cost, p.PeakInFlight)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
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
				b.WriteString(t.Tenant + " " + strconv.FormatInt(t.Rejected+t.WouldReject, 10))
				if t.Requests > 0 {
					b.WriteString("/" + strconv.FormatInt(t.Requests, 10))
				}
				b.WriteString(" (" + percent(t.Share) + ")")
			}
			fmt.Fprintf(w, "  %s %s: %s\n", c.Candidate, p.Policy, b.String())
		}
	}
	_, err := fmt.Fprint(w)
	return err
}

func percent(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + "%" }
