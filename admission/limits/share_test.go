package limits_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/admission/limits"
)

func TestValidateShares(t *testing.T) {
	shares := func(s ...limits.Share) []limits.Share { return s }
	tests := []struct {
		name  string
		queue limits.Queue
		want  []string
	}{
		{"valid", limits.Queue{Size: 10, Shares: shares(limits.Share{Priority: 10, Percent: 70}, limits.Share{Priority: 0, Percent: 30})}, nil},
		{"one share leaves the rest", limits.Queue{Size: 10, Shares: shares(limits.Share{Priority: 10, Percent: 70})}, nil},
		{"no queue", limits.Queue{Shares: shares(limits.Share{Priority: 1, Percent: 50})},
			[]string{"policies[0].queue.shares: set without a queue (queue.size is 0)"}},
		{"percent out of range", limits.Queue{Size: 1, Shares: shares(limits.Share{Priority: 1, Percent: 0}, limits.Share{Priority: 2, Percent: 101})},
			[]string{"policies[0].queue.shares[0].percent: must be in [1, 100], got 0", "policies[0].queue.shares[1].percent: must be in [1, 100], got 101"}},
		{"duplicate priority", limits.Queue{Size: 1, Shares: shares(limits.Share{Priority: 1, Percent: 10}, limits.Share{Priority: 1, Percent: 20})},
			[]string{"policies[0].queue.shares[1].priority: 1 already has a share at policies[0].queue.shares[0]"}},
		{"over 100", limits.Queue{Size: 1, Shares: shares(limits.Share{Priority: 1, Percent: 70}, limits.Share{Priority: 2, Percent: 40})},
			[]string{"policies[0].queue.shares: percents add up to 110, more than 100"}},
		{"too many classes", limits.Queue{Size: 1, Shares: func() (s []limits.Share) {
			for i := range limits.MaxShares + 1 {
				s = append(s, limits.Share{Priority: i, Percent: 1})
			}
			return s
		}()}, []string{"policies[0].queue.shares: at most 16 classes, got 17"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := limits.Policy{Name: "shared", Algorithm: limits.Concurrency, Limit: 10, Queue: tt.queue}
			got := fieldErrors(p.Validate("policies[0]"))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate = %q; want %q", got, tt.want)
			}
		})
	}
}

// fieldErrors flattens err, joined errors of joined errors, into the
// messages of its FieldErrors.
func fieldErrors(err error) []string {
	var fe *limits.FieldError
	switch e := err.(type) {
	case nil:
		return nil
	case interface{ Unwrap() []error }:
		var out []string
		for _, w := range e.Unwrap() {
			out = append(out, fieldErrors(w)...)
		}
		return out
	default:
		if errors.As(err, &fe) {
			return []string{fe.Error()}
		}
		return []string{"not a FieldError: " + err.Error()}
	}
}
