package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/weights"
)

func init() {
	register(&command{
		name:    "check",
		usage:   "[-q] FILE",
		summary: "validate a policy file offline: every problem with its line and the nearest valid name for a typo; warnings for settings that defeat a limit; the effective policies per plan and the models without a price (-prices: every price)",
		run:     runCheck,
	})
}

func runCheck(_ context.Context, e *env, fs *flag.FlagSet, args []string) int {
	quiet := fs.Bool("q", false, "print nothing but problems and warnings (on stderr) when the file is valid")
	listed := fs.Bool("prices", false, "list the price of every model the prices section or a policy names (in, cache read, cache write, out, batch discount), when a policy counts cost")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	f, raw, ok := loadPolicyFile(e.stderr, path)
	if !ok {
		return 1
	}
	for _, w := range append(unitWarnings(f, raw), exemptWarnings(f, raw)...) {
		fmt.Fprintf(e.stderr, "%s:%d:%d: %s: warning: %s\n", path, w.line, w.column, w.path, w.msg)
	}
	// The controller is the final judge of the rest. Stores are registered
	// by the program that runs the file; offline, in-memory ones stand in.
	var opts []admission.Option
	for _, name := range f.Stores() {
		opts = append(opts, admission.WithStore(name, memstore.Store{}))
	}
	if _, err := admission.New(f.Config, opts...); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", path, err)
		return 1
	}
	prices, err := pricing.Table(f.Prices)
	if err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", path, err)
		return 1
	}
	if *quiet {
		return 0
	}
	fmt.Fprintf(e.stdout, "%s: OK: %d policies, %d plans, %d tenants, %d API keys\n",
		path, len(f.Config.Policies), len(f.Config.Plans.Plans), len(f.Config.Plans.Tenants), len(f.Identity.Keys))
	if stores := f.Stores(); len(stores) > 0 {
		fmt.Fprintf(e.stdout, "stores the program must register: %s\n", strings.Join(stores, ", "))
	}
	unpriced(e.stdout, f, prices)
	budgetLines(e.stdout, f)
	queueLines(e.stdout, f)
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLAN\tPOLICY\tMODE\tALGORITHM\tUNIT\tKEY\tLIMIT\tBURST\tPER\tQUEUE")
	for _, r := range f.Effective() {
		burst := "-"
		if r.Algorithm == limits.TokenBucket {
			burst = strconv.FormatInt(r.Burst, 10)
		}
		per := "-"
		switch {
		case r.Algorithm == limits.Quota && r.Period != limits.PeriodFixed:
			per = r.Period.String()
		case r.Per > 0:
			per = formatDuration(r.Per)
		}
		queue := "-"
		if r.Queue > 0 {
			queue = strconv.Itoa(r.Queue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
			r.Plan, r.Policy, r.Mode, r.Algorithm, r.Unit, r.Key, r.Limit, burst, per, queue)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	if d := f.Config.Plans.Default; d != "" {
		fmt.Fprintf(e.stdout, "\ntenants without a plan are on %q; \"-\" rows are the policies' own limits\n", d)
	}
	if *listed {
		listPrices(e.stdout, f, prices)
	}
	return 0
}

// loadPolicyFile reads and validates the policy file at path. When it is
// not valid it writes every problem to w, reworded by explain, and
// reports false.
func loadPolicyFile(w io.Writer, path string) (*config.File, rawFile, bool) {
	data, err := config.ReadFile(path)
	if err != nil {
		fmt.Fprintln(w, err)
		return nil, rawFile{}, false
	}
	f, root, err := config.ParseTree(path, data)
	raw := rawFile{root}
	if err != nil {
		var es config.Errors
		if !errors.As(err, &es) {
			fmt.Fprintln(w, err)
			return nil, raw, false
		}
		names := raw.names()
		for _, pe := range es {
			x := *pe
			x.Msg = explain(x.Msg, names)
			fmt.Fprintln(w, x.Error())
		}
		fmt.Fprintf(w, "%s: %d problem(s); the file was not accepted\n", path, len(es))
		return nil, raw, false
	}
	return f, raw, true
}

// unpriced lists the models the policies name that no entry of the price
// table matches, and says what happens to their requests; nothing when
// no policy counts cost, as prices then decide nothing.
func unpriced(w io.Writer, f *config.File, prices *weights.Prices) {
	if !slices.ContainsFunc(f.Config.Policies, func(p admission.Policy) bool { return p.Unit == limits.UnitCost }) {
		return // prices matter only to policies that count cost
	}
	type named struct{ model, at string }
	var missing []named
	seen := map[string]bool{}
	for i, p := range f.Config.Policies {
		for j, m := range p.Match.Models {
			if _, src, _ := prices.Resolve(m); seen[m] || src != weights.PriceUnpriced && src != weights.PriceFallback {
				continue
			}
			seen[m] = true
			missing = append(missing, named{m, fmt.Sprintf("policies[%d].match.models[%d]", i, j)})
		}
	}
	what := "refused (prices.unpriced: refuse)"
	if fb := f.Prices.Fallback; fb != nil {
		what = fmt.Sprintf("charged the fallback price, $%g in and $%g out per million tokens (prices.fallback)", fb.Input, fb.Output)
	}
	if len(missing) == 0 {
		fmt.Fprintf(w, "prices: every model the policies name has a price; requests for other models are %s\n", what)
		return
	}
	fmt.Fprintf(w, "prices: %d model(s) the policies name have no price; their requests are %s:\n", len(missing), what)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, m := range missing {
		fmt.Fprintf(tw, "  %s\t%s\n", m.model, m.at)
	}
	tw.Flush()
}

// listPrices lists, when a policy counts cost, the price of every model
// the prices section (its aliases too) or a policy names, as requests for it are charged:
// per million tokens in, read from the cache, written to it, out, and
// the Batch API discount, with where the price comes from.
func listPrices(w io.Writer, f *config.File, prices *weights.Prices) {
	if !slices.ContainsFunc(f.Config.Policies, func(p admission.Policy) bool { return p.Unit == limits.UnitCost }) {
		return
	}
	var models []string
	for m := range f.Prices.Models {
		models = append(models, m)
	}
	for m := range f.Prices.Aliases {
		models = append(models, m)
	}
	for _, p := range f.Config.Policies {
		models = append(models, p.Match.Models...)
	}
	slices.Sort(models)
	models = slices.Compact(models)
	fmt.Fprintln(w, "\nprices in US dollars per million tokens (cache reads and writes at the input price when not set, one-hour writes at the cache-write price):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tINPUT\tCACHED_INPUT\tCACHE_WRITE\tCACHE_WRITE_1H\tOUTPUT\tBATCH_DISCOUNT\tSOURCE")
	row := func(name string, p weights.Price, src string) {
		opt := func(v float64) string {
			if v == 0 {
				return "-"
			}
			return strconv.FormatFloat(v, 'g', -1, 64)
		}
		batch := "-"
		if p.BatchDiscount > 0 {
			batch = strconv.FormatFloat(p.BatchDiscount*100, 'g', 4, 64) + "%"
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%s\t%s\t%g\t%s\t%s\n", name, p.Input, opt(p.CachedInput), opt(p.CacheWrite), opt(p.CacheWrite1h), p.Output, batch, src)
	}
	for _, m := range models {
		p, src, ok := prices.Resolve(m)
		if !ok {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s\n", m, src)
			continue
		}
		if target, ok := f.Prices.Aliases[m]; ok {
			row(m, p, "alias of "+target)
			continue
		}
		row(m, p, src.String())
	}
	if fb := f.Prices.Fallback; fb != nil {
		row("(fallback)", weights.Price(*fb), "prices.fallback")
	}
	tw.Flush()
}

// formatDuration writes 1m rather than 1m0s.
func formatDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 && d >= 48*time.Hour {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// queueLines says, for each policy that queues on a shared store, that its
// queue is held by each replica: the limit is decided fleet-wide, but the
// waiters are bounded per replica, so a fleet holds up to replicas × size
// of them. The figure uses the policy's replicas when it sets them.
func queueLines(w io.Writer, f *config.File) {
	for _, p := range f.Config.Policies {
		if p.Queue.Size == 0 || p.Store == "" || p.Store == "memory" {
			continue
		}
		fleet := "n × " + strconv.Itoa(p.Queue.Size) + " across n replicas"
		if p.Replicas > 1 {
			fleet = strconv.Itoa(p.Replicas*p.Queue.Size) + " across its " + strconv.Itoa(p.Replicas) + " replicas"
		}
		fmt.Fprintf(w, "queues: %s on store %q: its limit is fleet-wide, its queue per replica: up to %d waiters per replica (%s)\n",
			p.Name, p.Store, p.Queue.Size, fleet)
	}
}
