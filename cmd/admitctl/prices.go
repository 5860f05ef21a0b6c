package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

func init() {
	register(&command{
		name:    "prices",
		usage:   "[--config FILE] [--request-log FILE]",
		summary: "list the built-in price table with each entry's provider page and month (unverified entries marked), and with --request-log the models seen in traffic that have no price (exit 1 when there are some)",
		run:     runPrices,
	})
}

// maxTrafficModels bounds the distinct models prices counts in a request
// log; the others are counted together.
const maxTrafficModels = 10_000

func runPrices(_ context.Context, e *env, fs *flag.FlagSet, args []string) int {
	cfgPath := fs.String("config", "", "price the request log's models by this policy file's prices section (its entries, aliases, fallback) rather than the built-in table alone")
	logPath := fs.String("request-log", "", "a request log (llmproxy --request-log); its models without a price are listed with their request counts")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	table, err := weights.NewPriceTable(weights.PricesConfig{})
	if err != nil {
		fmt.Fprintf(e.stderr, "admitctl prices: %v\n", err)
		return 1
	}
	if *cfgPath != "" {
		f, _, ok := loadPolicyFile(e.stderr, *cfgPath)
		if !ok {
			return 1
		}
		if table, err = pricing.Table(f.Prices); err != nil {
			fmt.Fprintf(e.stderr, "%s: prices: %v\n", *cfgPath, err)
			return 1
		}
	}
	writeBuiltinPrices(e.stdout)
	if *logPath == "" {
		return 0
	}
	fh, err := os.Open(*logPath)
	if err != nil {
		fmt.Fprintf(e.stderr, "admitctl prices: %v\n", err)
		return 1
	}
	defer fh.Close()
	t, err := readTraffic(fh, maxTrafficModels)
	if err != nil {
		fmt.Fprintf(e.stderr, "admitctl prices: %s: %v\n", *logPath, err)
		return 1
	}
	if t.bad > 0 {
		fmt.Fprintf(e.stderr, "%s: %d malformed line(s) skipped\n", *logPath, t.bad)
	}
	return writeUnpriced(e.stdout, *logPath, t, table)
}

// writeBuiltinPrices lists the built-in table: each entry's prices (US
// dollars per million tokens), the month it dates from and its page.
func writeBuiltinPrices(w io.Writer) {
	fmt.Fprintln(w, "built-in prices in US dollars per million tokens (batch: the Batch API's discount), with the provider's page and the month it lists them from:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tIN\tCACHE READ\tCACHE WRITE\tCACHE WRITE 1H\tOUT\tBATCH\tSINCE\tSOURCE\tNOTE")
	// usd formats a price, or the first of its fallbacks set when it is
	// not.
	usd := func(v float64, fallbacks ...float64) string {
		for _, f := range fallbacks {
			if v != 0 {
				break
			}
			v = f
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	unverified := 0
	for _, l := range weights.BuiltinPrices() {
		p, note := l.Price, ""
		if l.Unverified {
			note, unverified = "unverified", unverified+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Model, usd(p.Input, 0), usd(p.CachedInput, p.Input), usd(p.CacheWrite, p.Input), usd(p.CacheWrite1h, p.CacheWrite, p.Input),
			usd(p.Output, 0), strconv.FormatFloat(p.BatchDiscount*100, 'f', -1, 64)+"%", l.Since, l.Source, note)
	}
	tw.Flush()
	if unverified > 0 {
		fmt.Fprintf(w, "%d entries are unverified: not checked against their page when entered; check them, or price the models in the policy file's prices section\n", unverified)
	}
}

// traffic is what a request log says of its models: the requests of each
// (at most a bounded number of distinct names), the requests of the
// others, and the malformed lines skipped.
type traffic struct {
	requests map[string]int64
	others   int64
	bad      int64
}

// readTraffic counts the requests of each model of a request log, up to
// maxModels distinct names.
func readTraffic(r io.Reader, maxModels int) (traffic, error) {
	t := traffic{requests: map[string]int64{}}
	lr := requestlog.NewReader(r)
	for {
		var rec requestlog.Record
		err := lr.Read(&rec)
		var re *requestlog.RecordError
		switch {
		case errors.Is(err, io.EOF):
			return t, nil
		case errors.As(err, &re):
			t.bad++
			continue
		case err != nil:
			return t, err
		}
		if rec.Model == "" {
			continue
		}
		if _, seen := t.requests[rec.Model]; seen || len(t.requests) < maxModels {
			t.requests[rec.Model]++
		} else {
			t.others++
		}
	}
}

// writeUnpriced lists the models of t that table does not price, or
// prices only by its fallback, with their request counts; it returns 1
// when some model has no price at all.
func writeUnpriced(w io.Writer, log string, t traffic, table *weights.Prices) int {
	var none, fallback []string
	for _, m := range slices.Sorted(maps.Keys(t.requests)) {
		switch _, src, _ := table.Resolve(m); src {
		case weights.PriceUnpriced:
			none = append(none, m)
		case weights.PriceFallback:
			fallback = append(fallback, m)
		}
	}
	fmt.Fprintf(w, "\n%s: %d model(s) seen", log, len(t.requests))
	if t.others > 0 {
		fmt.Fprintf(w, " (and %d request(s) of more models than the %d counted)", t.others, maxTrafficModels)
	}
	fmt.Fprintln(w)
	list := func(what string, ms []string) {
		if len(ms) == 0 {
			return
		}
		fmt.Fprintf(w, "%d model(s) %s:\n", len(ms), what)
		for _, m := range ms {
			fmt.Fprintf(w, "  %-40s %d request(s)\n", strconv.Quote(m), t.requests[m])
		}
	}
	list("with no price (refused while a policy counts cost; give each a price in prices.models)", none)
	list("charged the fallback price (prices.fallback)", fallback)
	if len(none) > 0 {
		return 1
	}
	if len(fallback) == 0 {
		fmt.Fprintln(w, "every model seen has a price")
	}
	return 0
}
