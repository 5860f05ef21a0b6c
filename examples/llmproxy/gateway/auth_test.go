package gateway

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
)

// The throttle allows Limit failures per Per to each address, tells a
// throttled address when to come back, forgives with time, and keeps its
// table bounded under a flood from many addresses.
func TestAuthLimiter(t *testing.T) {
	ctx := context.Background()
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	a, err := nextAuthLimiter(nil, config.FailedAuth{Enabled: true, Limit: 3, Per: time.Minute, MaxAddresses: 100}, clk)
	if err != nil {
		t.Fatal(err)
	}
	x, y := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for i := range 3 {
		if _, ok := a.allow(ctx, x); !ok {
			t.Fatalf("allow(x) before failure %d = false; want true", i+1)
		}
		a.failed(ctx, x)
	}
	wait, ok := a.allow(ctx, x)
	if ok || wait <= 0 || wait > 20*time.Second {
		t.Errorf("allow(x) after 3 failures = %v, %v; want false and the 20s one failure takes to refill", wait, ok)
	}
	if _, ok := a.allow(ctx, y); !ok {
		t.Error("allow(y) = false; another address keeps its allowance")
	}
	// Peeking takes nothing: many allowed checks leave the allowance whole.
	for range 100 {
		a.allow(ctx, y)
	}
	for i := range 3 {
		if _, ok := a.allow(ctx, y); !ok {
			t.Fatalf("allow(y) before failure %d = false after checks alone", i+1)
		}
		a.failed(ctx, y)
	}
	clk.Advance(20 * time.Second)
	if _, ok := a.allow(ctx, x); !ok {
		t.Error("allow(x) 20s later = false; want one attempt back")
	}

	// A flood of failures from 10,000 addresses keeps at most
	// MaxAddresses partitions; the addresses tracked are throttled, and
	// those past the table are not refused for the others' failures.
	for i := range 10_000 {
		addr := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		a.failed(ctx, addr)
		a.failed(ctx, addr)
		a.failed(ctx, addr)
	}
	st := a.ctl.Stats()
	if len(st) != 1 || st[0].Partitions > 100 {
		t.Errorf("after a flood from 10,000 addresses: %+v; want at most 100 partitions", st)
	}
	if _, ok := a.allow(ctx, netip.AddrFrom4([4]byte{10, 0, 0, 0})); ok {
		t.Error("the flood's first address, tracked, is allowed; want throttled")
	}
	if _, ok := a.allow(ctx, netip.MustParseAddr("10.200.0.1")); !ok {
		t.Error("a new address during the flood is throttled for the failures of others")
	}

	off, err := nextAuthLimiter(nil, config.FailedAuth{}, clk)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		off.failed(ctx, x)
	}
	if _, ok := off.allow(ctx, x); !ok {
		t.Error("a disabled throttle refused an address")
	}
}

// A reload changes the figures and keeps each address's allowance.
func TestNextAuthLimiter(t *testing.T) {
	ctx := context.Background()
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	a, err := nextAuthLimiter(nil, config.FailedAuth{Enabled: true, Limit: 3, Per: time.Hour, MaxAddresses: 100}, clk)
	if err != nil {
		t.Fatal(err)
	}
	x := netip.MustParseAddr("192.0.2.1")
	for range 3 {
		a.failed(ctx, x)
	}
	if _, ok := a.allow(ctx, x); ok {
		t.Fatal("allowed after 3 of 3 failures")
	}
	if a, err = nextAuthLimiter(a, config.FailedAuth{Enabled: true, Limit: 5, Per: time.Hour, MaxAddresses: 100}, clk); err != nil {
		t.Fatal(err)
	}
	// The address's allowance is still spent; it refills at the new
	// rate, one failure every 12 minutes.
	if _, ok := a.allow(ctx, x); ok {
		t.Error("limit raised to 5: the spent allowance was forgotten")
	}
	clk.Advance(12 * time.Minute)
	if _, ok := a.allow(ctx, x); !ok {
		t.Error("limit raised to 5: no attempt back 12 minutes later")
	}
	if a, err = nextAuthLimiter(a, config.FailedAuth{}, clk); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.allow(ctx, x); !ok {
		t.Error("disabled by a reload: still refused")
	}
}
