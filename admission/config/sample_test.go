package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

// TestDecisionSampleBounds refuses a logging.decisions.sample that is not
// a number (NaN, which every comparison lets through) or so small that
// one in round(1/sample) overflows an int (1e-300, which the decision log
// would read as "log every decision"), and accepts the fractions that
// mean what they say.
func TestDecisionSampleBounds(t *testing.T) {
	const pol = "policies:\n  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 60, per: 1m}\nlogging:\n  decisions:\n    sample: "
	for _, s := range []string{"NaN", "nan", "1e-300", "1e-19", "5e-10", "-0.1", "1.5", "Inf"} {
		_, err := config.Parse("p.yaml", []byte(pol+s+"\n"))
		if err == nil || !strings.Contains(err.Error(), "logging.decisions.sample") {
			t.Errorf("sample %s: Parse = %v; want an error at logging.decisions.sample", s, err)
		}
	}
	for s, want := range map[string]float64{"0": 0, "1": 1, "0.01": 0.01, "1e-9": 1e-9} {
		f, err := config.Parse("p.yaml", []byte(pol+s+"\n"))
		if err != nil {
			t.Errorf("sample %s: %v", s, err)
			continue
		}
		if f.Logging.DecisionSample != want {
			t.Errorf("sample %s = %v; want %v", s, f.Logging.DecisionSample, want)
		}
	}
}
