package gateway

import (
	"context"
	"sync"
	"time"
)

// budget bounds the request-body bytes being read and priced at once, so
// that many large bodies arriving together cannot exhaust memory before
// admission has seen them. A request reserves the bytes it may read (its
// Content-Length, or the body cap when it sends none) before reading; one
// that does not fit waits, first come first served, for at most the
// budget's wait and is then refused.
type budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	wait    time.Duration
	waiters []*budgetWaiter // FIFO
}

// maxBudgetWaiters bounds the line of requests waiting for body bytes; a
// request beyond it is refused at once.
const maxBudgetWaiters = 1024

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the bytes were granted
}

func newBudget(limit int64, wait time.Duration) *budget {
	return &budget{limit: limit, wait: wait}
}

// acquire reserves n bytes (at most the whole budget: a single request
// larger than the budget is capped so that it can still run alone). It
// reports false when the bytes did not free up within the budget's wait
// or ctx ended first.
func (b *budget) acquire(ctx context.Context, n int64) (int64, bool) {
	n = min(max(n, 1), b.limit)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.limit {
		b.used += n
		b.mu.Unlock()
		return n, true
	}
	if b.wait <= 0 || len(b.waiters) >= maxBudgetWaiters {
		b.mu.Unlock()
		return 0, false
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-w.ready:
		return n, true
	case <-t.C:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted while giving up: keep it rather than leak it.
		return n, true
	default:
	}
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.grantLocked() // the head may have been waiting behind this one
	return 0, false
}

// release gives back n bytes taken by acquire.
func (b *budget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked hands freed bytes to the waiters at the head of the line.
func (b *budget) grantLocked() {
	for len(b.waiters) > 0 {
		w := b.waiters[0]
		if b.used+w.n > b.limit {
			return
		}
		b.used += w.n
		close(w.ready)
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
	}
}
