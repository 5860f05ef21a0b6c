package amounts_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/internal/amounts"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestBound: amounts in range are kept, above limits.MaxAmount saturated,
// negative refused as admission.ErrInvalidCost.
func TestBound(t *testing.T) {
	for _, tt := range []struct {
		in, want admission.Request
		invalid  bool
	}{
		{in: admission.Request{Tokens: 5, Cost: 7}, want: admission.Request{Tokens: 5, Cost: 7}},
		{in: admission.Request{Tokens: limits.MaxAmount + 1, Cost: 1 << 62}, want: admission.Request{Tokens: limits.MaxAmount, Cost: limits.MaxAmount}},
		{in: admission.Request{Tokens: -1}, invalid: true},
		{in: admission.Request{Cost: -1 << 63}, invalid: true},
		{in: admission.Request{Units: []admission.UnitAmount{{Unit: "rows", Amount: -1}}}, invalid: true},
	} {
		got := tt.in
		err := amounts.Bound(&got)
		if tt.invalid {
			if !errors.Is(err, admission.ErrInvalidCost) {
				t.Errorf("Bound(%+v) = %v; want ErrInvalidCost", tt.in, err)
			}
			continue
		}
		if err != nil || got.Tokens != tt.want.Tokens || got.Cost != tt.want.Cost {
			t.Errorf("Bound(%+v) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	units := admission.Request{Units: []admission.UnitAmount{{Unit: "rows", Amount: 1 << 60}}}
	if err := amounts.Bound(&units); err != nil || units.Units[0].Amount != limits.MaxAmount {
		t.Errorf("Bound(rows 2^60) = %+v, %v; want MaxAmount", units.Units, err)
	}
}
