package main

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
)

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []int64
		want float64
	}{
		{[]int64{5, 5, 5, 5}, 1},
		{[]int64{8, 0, 0, 0}, 0.25},
		{[]int64{2, 2, 0, 0}, 0.5},
		{[]int64{0, 0, 0, 0}, 0},
		{[]int64{3, 1}, 0.8},
	} {
		if got := jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("jain(%v) = %v; want %v", tc.xs, got, tc.want)
		}
	}
}

// The scenario's policy files are valid, and only the guarded one puts
// the provider's budget on an upstream store.
func TestProviderPolicy(t *testing.T) {
	s := providerSetup{Tokens: 30_000, Window: 10 * time.Second, Deadline: 10 * time.Second, Queue: 200}
	for _, guard := range []bool{false, true} {
		f, err := config.Parse("scenario", []byte(providerPolicy(s, guard)))
		if err != nil {
			t.Fatalf("guard %v: %v", guard, err)
		}
		if got := len(f.Upstreams) == 1 && len(f.Config.Policies) == 2; got != guard {
			t.Errorf("guard %v: %d upstream stores, %d policies", guard, len(f.Upstreams), len(f.Config.Policies))
		}
		if len(f.Config.Plans.Tenants) != len(tenants) {
			t.Errorf("guard %v: %d tenants; want %d", guard, len(f.Config.Plans.Tenants), len(tenants))
		}
	}
}

// The priority scenario's policy files are valid: the batch tenant's key
// is in the batch class only with classes, and only the shares mode
// reserves the floor.
func TestPriorityPolicy(t *testing.T) {
	s := prioritySetup{providerSetup: providerSetup{Tokens: 30_000, Window: 10 * time.Second, Deadline: 10 * time.Second, Queue: 200}, Floor: 30}
	for _, mode := range []priorityMode{noClasses, strictPriority, withShares} {
		f, err := config.Parse("scenario", []byte(priorityPolicy(s, mode)))
		if err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		batch := f.Priority(batchTenant, apikey.Sum("sk-batch").ID(), "POST /v1/chat/completions", nil)
		interactive := f.Priority("t1", apikey.Sum("sk-t1").ID(), "POST /v1/chat/completions", nil)
		if (batch < interactive) != (mode != noClasses) {
			t.Errorf("%v: batch priority %d, interactive %d", mode, batch, interactive)
		}
		shares := f.Config.Policies[2].Queue.Shares
		if want := mode == withShares; (len(shares) == 2 && shares[1].Percent == 30 && shares[1].Priority == batch) != want {
			t.Errorf("%v: shares %v", mode, shares)
		}
	}
}

func TestClassShares(t *testing.T) {
	tokens := []int64{10, 10, 10, 10, 60}
	slots := [][]int64{{5, 5}, {5, 5}, {5, 5}, {5, 5}, {40, 20}}
	i, b, bmin := classShares(tokens, slots)
	if math.Abs(i-0.4) > 1e-12 || math.Abs(b-0.6) > 1e-12 || math.Abs(bmin-0.5) > 1e-12 {
		t.Errorf("classShares = %v, %v, %v; want 0.4, 0.6, 0.5", i, b, bmin)
	}
	if i, b, bmin := classShares([]int64{0, 0}, [][]int64{{0}, {0}}); i != 0 || b != 0 || bmin != 0 {
		t.Errorf("classShares of nothing = %v, %v, %v; want zeros", i, b, bmin)
	}
}
