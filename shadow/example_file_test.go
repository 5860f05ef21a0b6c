package shadow_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/shadow"
)

// The logging section in a service: a logger at the file's level and
// format, and the decision log in front of the other observers (in a
// program, the metrics.Observer), which writes every rejection.
func ExampleFileObserver() {
	f, _ := config.Parse("policies.yaml", []byte(`
policies:
  - {name: rpm, key: tenant, algorithm: token_bucket, limit: 1, per: 1m}
logging: {level: info, format: json, decisions: {rejections: true}}
`))
	var out bytes.Buffer // os.Stderr in a program
	obs, _ := shadow.FileObserver(&f.Logging, shadow.FileLogger(&out, &f.Logging))
	ctl, _ := admission.New(f.Config, admission.WithObserver(obs),
		admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	for range 2 {
		_, err := ctl.Admit(context.Background(), admission.Request{Tenant: "acme"})
		fmt.Println("rate limited:", errors.Is(err, admission.ErrRateLimited))
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var rec map[string]any
		_ = json.Unmarshal(sc.Bytes(), &rec)
		fmt.Println(rec["level"], rec["msg"], rec["policy"], rec["decision"], rec["reason"], rec["tenant"])
	}
	// Output:
	// rate limited: false
	// rate limited: true
	// WARN admission decision rpm rejected rate acme
}
