package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/upstream"
)

// provider simulates an OpenAI-style token limit: a bucket of limit
// tokens refilled continuously over a minute, answering with
// x-ratelimit-* headers, and 429 with retry-after-ms when a request does
// not fit.
type provider struct {
	limit float64
	level float64
	last  time.Time
}

func (p *provider) call(n int64, now time.Time) (status int, h http.Header) {
	rate := p.limit / float64(time.Minute)
	p.level = min(p.limit, p.level+rate*float64(now.Sub(p.last)))
	p.last = now
	status = http.StatusOK
	h = http.Header{}
	if float64(n) > p.level {
		status = http.StatusTooManyRequests
		h.Set("retry-after-ms", strconv.FormatFloat((float64(n)-p.level)/rate/float64(time.Millisecond), 'f', 3, 64))
	} else {
		p.level -= float64(n)
	}
	h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(int64(p.limit), 10))
	h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(int64(p.level), 10))
	h.Set("x-ratelimit-reset-tokens", (time.Duration((p.limit - p.level) / rate)).String())
	return status, h
}

// TestLearnedBudgetAbsorbs429s: four tenants offer four times what a
// provider of 60,000 tokens a minute accepts, through a gateway whose
// static budget was set at twice the provider's real tier. Learning from
// the provider's headers, almost no admitted request meets a provider 429
// and the provider's budget is used to the full; with the static budget
// alone, about half of them do.
func TestLearnedBudgetAbsorbs429s(t *testing.T) {
	for _, tc := range []struct {
		store     string
		max429    float64 // of the requests admitted
		min429    float64
		minUseful float64 // of the provider's tokens
	}{
		{"upstream", 0.01, 0, 0.95},
		{"", 1, 0.3, 0}, // the in-memory store: today's behaviour
	} {
		t.Run(fmt.Sprintf("store=%q", tc.store), func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			s, _ := upstream.New(upstream.Config{})
			c, err := admission.New(admission.Config{Policies: []limits.Policy{{
				Name: "tpm", Store: tc.store, Key: []limits.KeyPart{limits.KeyModel}, Unit: limits.UnitTokens,
				Algorithm: limits.TokenBucket, Limit: 120_000, Per: time.Minute,
			}}}, admission.WithClock(clock), admission.WithStore("upstream", s))
			if err != nil {
				t.Fatal(err)
			}
			p := &provider{limit: 60_000, level: 60_000, last: clock.Now()}
			const run = time.Minute
			var admitted, throttled, used int64
			for clock.Now().Sub(backendtest.Epoch) < run {
				for tenant := range 4 {
					r := admission.Request{Tenant: fmt.Sprint("t", tenant), Model: "gpt-4o", Tokens: 100}
					tk, err := c.TryAdmit(context.Background(), r)
					if errors.Is(err, admission.ErrRateLimited) {
						continue
					} else if err != nil {
						t.Fatal(err)
					}
					admitted++
					status, h := p.call(r.Tokens, clock.Now())
					s.Observe(r.Model, upstream.Parse(h.Get, status, clock.Now()))
					if status == http.StatusTooManyRequests {
						throttled++
					} else {
						used += r.Tokens
					}
					tk.Done()
				}
				clock.Advance(25 * time.Millisecond)
			}
			capacity := 60_000 + 60_000*run.Minutes()
			ratio, useful := float64(throttled)/float64(admitted), float64(used)/capacity
			t.Logf("admitted %d, provider 429s %d (%.2f%%), provider tokens used %.1f%%", admitted, throttled, 100*ratio, 100*useful)
			if ratio > tc.max429 || ratio < tc.min429 || useful < tc.minUseful {
				t.Errorf("429s %.3f of admitted, %.3f of the provider's tokens used; want 429s in [%v, %v] and use >= %v", ratio, useful, tc.min429, tc.max429, tc.minUseful)
			}
		})
	}
}

// TestLearnedBudgetQueuedFair: the same provider and gateway, with the
// four tenants waiting in the policy's queue instead of being refused:
// at most 1% of the admitted requests meet a provider 429, the
// provider's budget is used to the full, and once the first burst (the
// provider's full bucket, taken by whoever asks first) is spent, the
// tenants share it equally: Jain's index of their tokens >= 0.95.
func TestLearnedBudgetQueuedFair(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	s, _ := upstream.New(upstream.Config{})
	c := newController(t, clock, s, limits.Policy{
		Name: "tpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel}, Unit: limits.UnitTokens,
		Algorithm: limits.TokenBucket, Limit: 120_000, Per: time.Minute, Queue: limits.Queue{Size: 10},
	})
	var mu sync.Mutex
	p := &provider{limit: 60_000, level: 60_000, last: clock.Now()}
	var admitted, throttled, total int64
	const warmup = 10 * time.Second
	used := make([]int64, 4) // after warmup
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for tenant := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := admission.Request{Tenant: fmt.Sprint("t", tenant), Model: "gpt-4o", Tokens: 100}
			for {
				tk, err := c.Admit(ctx, r)
				if err != nil {
					return // the run is over
				}
				mu.Lock()
				now := clock.Now()
				status, h := p.call(r.Tokens, now)
				s.Observe(r.Model, upstream.Parse(h.Get, status, now))
				admitted++
				if status == http.StatusTooManyRequests {
					throttled++
				} else {
					total += r.Tokens
					if now.Sub(backendtest.Epoch) >= warmup {
						used[tenant] += r.Tokens
					}
				}
				mu.Unlock()
				tk.Done()
			}
		}()
	}
	const run = time.Minute
	for clock.Now().Sub(backendtest.Epoch) < run {
		waitFor(t, "every tenant to wait", func() bool { return queued(c) == 4 })
		clock.Advance(25 * time.Millisecond)
	}
	waitFor(t, "every tenant to wait", func() bool { return queued(c) == 4 })
	cancel()
	wg.Wait()
	var sum, squares float64
	for _, u := range used {
		sum += float64(u)
		squares += float64(u) * float64(u)
	}
	jain := sum * sum / (4 * squares)
	useful := float64(total) / (60_000 + 60_000*run.Minutes())
	ratio := float64(throttled) / float64(admitted)
	t.Logf("admitted %d, provider 429s %d, tokens by tenant %v, provider tokens used %.1f%%, Jain's index %.4f", admitted, throttled, used, 100*useful, jain)
	if ratio > 0.01 || useful < 0.95 || jain < 0.95 {
		t.Errorf("429s %.3f of admitted, %.3f of the provider's tokens used, Jain's index %.3f; want <= 0.01, >= 0.95, >= 0.95", ratio, useful, jain)
	}
}

// TestLearnedBudgetClasses: interactive requests (priority 10, a 70%
// share) and a batch tenant saturating the queue behind the same
// provider. Interactive traffic within its share waits little (p99 <= 2s,
// in fact one refill) and batch keeps every token interactive leaves;
// interactive traffic offered beyond its share gets 70% and batch its
// 30% floor.
func TestLearnedBudgetClasses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration // one interactive request of 100 tokens each
		// want, of the provider's tokens used after warmup:
		minInteractive, minBatch float64
		maxP99                   time.Duration
	}{
		{"interactive within its share", 200 * time.Millisecond, 0.49, 0.49, 2 * time.Second},
		{"interactive beyond its share", 25 * time.Millisecond, 0.69, 0.29, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := admissiontest.NewClock(backendtest.Epoch)
			s, _ := upstream.New(upstream.Config{})
			c := newController(t, clock, s, limits.Policy{
				Name: "tpm", Store: "upstream", Key: []limits.KeyPart{limits.KeyModel}, Unit: limits.UnitTokens,
				Algorithm: limits.TokenBucket, Limit: 60_000, Per: time.Minute,
				// Room for every request of the run: none is refused.
				Queue: limits.Queue{Size: 5000, Shares: []limits.Share{{Priority: 10, Percent: 70}}},
			})
			var mu sync.Mutex
			p := &provider{limit: 60_000, level: 0, last: clock.Now()}
			const warmup, run = 10 * time.Second, time.Minute
			var byClass [2]int64 // tokens used after warmup: batch, interactive
			var waits []time.Duration
			call := func(r admission.Request, class int) {
				mu.Lock()
				defer mu.Unlock()
				now := clock.Now()
				status, h := p.call(r.Tokens, now)
				s.Observe(r.Model, upstream.Parse(h.Get, status, now))
				if status == http.StatusOK && now.Sub(backendtest.Epoch) >= warmup {
					byClass[class] += r.Tokens
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			const batchers = 4
			for i := range batchers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := admission.Request{Tenant: "batch", Model: "gpt-4o", Tokens: 100, Priority: 0, User: fmt.Sprint(i)}
					for {
						tk, err := c.Admit(ctx, r)
						if err != nil {
							return
						}
						call(r, 0)
						tk.Done()
					}
				}()
			}
			var live int
			var liveMu sync.Mutex
			alive := func() int { liveMu.Lock(); defer liveMu.Unlock(); return live }
			for next := time.Duration(0); clock.Now().Sub(backendtest.Epoch) < run; {
				for ; next <= clock.Now().Sub(backendtest.Epoch); next += tc.every {
					liveMu.Lock()
					live++
					liveMu.Unlock()
					wg.Add(1)
					go func(arrived time.Time) {
						defer wg.Done()
						r := admission.Request{Tenant: "interactive", Model: "gpt-4o", Tokens: 100, Priority: 10}
						tk, err := c.Admit(ctx, r)
						if err == nil {
							call(r, 1)
							tk.Done()
							mu.Lock()
							if arrived.Sub(backendtest.Epoch) >= warmup {
								waits = append(waits, clock.Now().Sub(arrived))
							}
							mu.Unlock()
						}
						liveMu.Lock()
						live--
						liveMu.Unlock()
					}(clock.Now())
				}
				waitFor(t, "every request to wait", func() bool { return queued(c) == batchers+alive() })
				clock.Advance(25 * time.Millisecond)
			}
			waitFor(t, "every request to wait", func() bool { return queued(c) == batchers+alive() })
			cancel()
			wg.Wait()
			slices.Sort(waits)
			p99 := waits[len(waits)*99/100]
			total := float64(byClass[0] + byClass[1])
			batch, interactive := float64(byClass[0])/total, float64(byClass[1])/total
			t.Logf("after warmup: %.0f tokens, interactive %.1f%%, batch %.1f%%, interactive queue wait p99 %v (%d requests)", total, 100*interactive, 100*batch, p99, len(waits))
			if interactive < tc.minInteractive || batch < tc.minBatch || (tc.maxP99 > 0 && p99 > tc.maxP99) {
				t.Errorf("interactive %.3f, batch %.3f, p99 %v; want >= %v, >= %v, p99 <= %v", interactive, batch, p99, tc.minInteractive, tc.minBatch, tc.maxP99)
			}
		})
	}
}
