package gateway

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestBudgetBoundsBytesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(100, time.Second)
		ctx := context.Background()
		a, ok := b.acquire(ctx, 60)
		if !ok || a != 60 {
			t.Fatalf("acquire(60) = %d, %v; want 60, true", a, ok)
		}
		got := make(chan int64, 1)
		go func() {
			n, ok := b.acquire(ctx, 50)
			if !ok {
				n = -1
			}
			got <- n
		}()
		synctest.Wait()
		select {
		case n := <-got:
			t.Fatalf("acquire(50) with 40 free returned %d at once; want it to wait", n)
		default:
		}
		time.Sleep(500 * time.Millisecond)
		b.release(a)
		if n := <-got; n != 50 {
			t.Fatalf("acquire(50) after release = %d; want 50", n)
		}
		// The line is first come first served: a small request does not
		// overtake a waiting large one.
		b.release(50)
		big, _ := b.acquire(ctx, 90)
		done := make(chan bool, 2)
		go func() { _, ok := b.acquire(ctx, 80); done <- ok }()
		synctest.Wait()
		go func() { _, ok := b.acquire(ctx, 5); done <- ok }()
		synctest.Wait()
		if b.used != 90 || len(b.waiters) != 2 {
			t.Fatalf("used %d, waiters %d; want 90 and 2 (no overtaking)", b.used, len(b.waiters))
		}
		b.release(big)
		if !<-done || !<-done {
			t.Fatal("a waiter was refused after the bytes were freed")
		}
		if b.used != 85 {
			t.Fatalf("used = %d; want 85", b.used)
		}
	})
}

func TestBudgetRefusesAfterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(100, 2*time.Second)
		ctx := context.Background()
		b.acquire(ctx, 100)
		start := time.Now()
		if n, ok := b.acquire(ctx, 1); ok {
			t.Fatalf("acquire on a full budget = %d, true; want a refusal", n)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("refused after %v; want the budget's wait, 2s", d)
		}
		if len(b.waiters) != 0 {
			t.Fatalf("%d waiters left behind", len(b.waiters))
		}
		// A cancelled caller leaves no waiter either.
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(time.Millisecond); cancel() }()
		if _, ok := b.acquire(cctx, 1); ok || len(b.waiters) != 0 {
			t.Fatalf("cancelled acquire: ok=%v waiters=%d; want false, 0", ok, len(b.waiters))
		}
		// A body larger than the whole budget runs alone rather than never.
		b.release(100)
		if n, ok := b.acquire(ctx, 1000); !ok || n != 100 {
			t.Fatalf("acquire(1000) on an empty budget of 100 = %d, %v; want 100, true", n, ok)
		}
	})
}

func TestBudgetBoundsTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(1, time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.acquire(ctx, 1)
		for range maxBudgetWaiters {
			go b.acquire(ctx, 1)
		}
		synctest.Wait()
		start := time.Now()
		if _, ok := b.acquire(ctx, 1); ok || time.Since(start) != 0 {
			t.Fatalf("acquire beyond %d waiters: ok=%v after %v; want an immediate refusal", maxBudgetWaiters, ok, time.Since(start))
		}
		cancel()
		synctest.Wait()
	})
}
