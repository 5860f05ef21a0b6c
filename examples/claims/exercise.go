package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Burst is how many claims tenant A fires at the start of every second of
// the exercise.
const Burst = 50

// A tally counts one tenant's claims in the exercise.
type tally struct {
	Sent, Admitted, Rejected int
	PerSecond                []int // admitted in each second
	// RetryAfter and RateLimit are the headers of the first 429.
	RetryAfter, RateLimit string
}

// result is what the exercise saw.
type result struct {
	A, B tally
}

// exercise runs the classic test of per-tenant limits against the claims
// API at base: in each of seconds seconds, tenant A (a batch job) fires
// Burst claims at once and then tenant B files one. tick is called
// between two seconds and returns when the next one starts. Every answer
// must be 201 or 429 with Retry-After; anything else is an error.
func exercise(ctx context.Context, client *http.Client, base string, seconds int, tick func(context.Context) error) (result, error) {
	var res result
	for sec := range seconds {
		if sec > 0 {
			if err := tick(ctx); err != nil {
				return res, err
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, Burst)
		var mu sync.Mutex
		res.A.PerSecond = append(res.A.PerSecond, 0)
		for i := range Burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, h, err := file(ctx, client, base, KeyA, fmt.Sprintf("A-%d-%d", sec, i))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				defer mu.Unlock()
				res.A.count(sec, ok, h)
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return res, err
		}
		res.B.PerSecond = append(res.B.PerSecond, 0)
		ok, h, err := file(ctx, client, base, KeyB, fmt.Sprintf("B-%d", sec))
		if err != nil {
			return res, err
		}
		res.B.count(sec, ok, h)
	}
	return res, nil
}

func (t *tally) count(sec int, admitted bool, h http.Header) {
	t.Sent++
	if admitted {
		t.Admitted++
		t.PerSecond[sec]++
		return
	}
	t.Rejected++
	if t.RetryAfter == "" {
		t.RetryAfter, t.RateLimit = h.Get("Retry-After"), h.Get("RateLimit")
	}
}

// file posts one claim with key and reports whether it was admitted.
func file(ctx context.Context, client *http.Client, base, key, policyNumber string) (bool, http.Header, error) {
	body := fmt.Sprintf(`{"policy_number":%q,"amount_cents":12000}`, policyNumber)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/claims", strings.NewReader(body))
	if err != nil {
		return false, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch resp.StatusCode {
	case http.StatusCreated:
		return true, resp.Header, nil
	case http.StatusTooManyRequests:
		if resp.Header.Get("Retry-After") == "" {
			return false, nil, fmt.Errorf("POST /claims: 429 without Retry-After")
		}
		return false, resp.Header, nil
	}
	return false, nil, fmt.Errorf("POST /claims: %s", resp.Status)
}

// print writes the exercise's counts as a table.
func (r *result) print(w io.Writer) {
	fmt.Fprintln(w, "second  A filed  A admitted  B filed  B admitted")
	for i := range r.A.PerSecond {
		fmt.Fprintf(w, "%6d  %7d  %10d  %7d  %10d\n", i, Burst, r.A.PerSecond[i], 1, r.B.PerSecond[i])
	}
	fmt.Fprintf(w, " total  %7d  %10d  %7d  %10d\n", r.A.Sent, r.A.Admitted, r.B.Sent, r.B.Admitted)
	for _, t := range []struct {
		name string
		t    *tally
	}{{"A", &r.A}, {"B", &r.B}} {
		if t.t.Rejected > 0 {
			fmt.Fprintf(w, "tenant %s: %d rejected with 429; the first had Retry-After: %s, RateLimit: %s\n", t.name, t.t.Rejected, t.t.RetryAfter, t.t.RateLimit)
		} else {
			fmt.Fprintf(w, "tenant %s: never throttled\n", t.name)
		}
	}
}

// runExercise starts the service on a free loopback port and runs the
// exercise against it in real time, then prints the counts, how many
// decisions were logged and the service's own decision counters.
func runExercise(ctx context.Context, o options, stdout io.Writer) error {
	logged := &lineCounter{}
	o.logOutput = logged
	s, err := start(o)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Fprintf(stdout, "claims: %s on %s: tenant A files %d claims at the start of every second, tenant B one, for %d s\n\n", s.file.Source, s.URL, Burst, o.seconds)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: Burst}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	began := time.Now()
	sec := 0
	res, err := exercise(ctx, client, s.URL, o.seconds, func(ctx context.Context) error {
		sec++
		t := time.NewTimer(time.Until(began.Add(time.Duration(sec) * time.Second)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	})
	if err != nil {
		return err
	}
	res.print(stdout)
	fmt.Fprintf(stdout, "\ndecision log (logging.decisions; stderr when serving): %d records of refused requests\n", logged.n)
	if s.MetricsURL == "" {
		return nil
	}
	fmt.Fprintf(stdout, "%s:\n", s.MetricsURL)
	return printDecisions(ctx, client, s.MetricsURL, stdout)
}

// printDecisions prints the admission_decisions_total series of the
// claims-create policy as scraped from url.
func printDecisions(ctx context.Context, client *http.Client, url string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "admission_decisions_total{") && strings.Contains(l, `policy="claims-create"`) {
			fmt.Fprintln(w, "  "+l)
		}
	}
	return sc.Err()
}

// lineCounter counts the decision records written to it, JSON or text
// (a handler writes one record per call).
type lineCounter struct {
	mu sync.Mutex
	n  int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes.Contains(p, []byte(`"msg":"admission decision"`)) || bytes.Contains(p, []byte(`msg="admission decision"`)) {
		c.n++
	}
	return len(p), nil
}
