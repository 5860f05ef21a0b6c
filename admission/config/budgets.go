package config

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// MaxWarnings bounds the warning thresholds of one quota.
const MaxWarnings = 8

// Budgets is the budgets section: where the warnings of the quotas that
// declare thresholds (PolicyInfo.Warn) are sent besides the metric and the
// log, which are always on. Package admission/budget acts on it.
//
//	budgets:
//	  webhook:
//	    url: https://hooks.example.com/sluice
//	    secret_env: SLUICE_WEBHOOK_SECRET
//	policies:
//	  - {name: monthly-spend, key: tenant, unit: cost, algorithm: quota,
//	     period: month, limit: 500M, warn: [50%, 80%, 95%]}
type Budgets struct {
	// Webhook, when set, receives every warning as a signed JSON POST.
	Webhook *Webhook
}

// Webhook is the budgets.webhook section. The secret itself is never in
// the file: SecretEnv names the environment variable that holds it, read
// by the program when it installs the file.
type Webhook struct {
	// URL is where warnings are POSTed (http or https, no credentials).
	URL string
	// SecretEnv names the environment variable holding the HMAC-SHA256
	// signing secret.
	SecretEnv string
	// Timeout bounds each delivery attempt (default 5s, at most 1m).
	Timeout time.Duration
	// Attempts is the most deliveries tried per warning (default 6, at
	// most 20).
	Attempts int
	// Backoff is the wait before the first retry (default 1s); each
	// retry waits twice the one before, with jitter, up to MaxBackoff
	// (default 1m, at most 1h).
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Queue bounds the warnings waiting for delivery (default 1024, at
	// most 100000); a warning that finds it full is dropped and counted.
	Queue int
}

// The budgets.webhook defaults.
const (
	DefaultWebhookTimeout    = 5 * time.Second
	DefaultWebhookAttempts   = 6
	DefaultWebhookBackoff    = time.Second
	DefaultWebhookMaxBackoff = time.Minute
	DefaultWebhookQueue      = 1024
)

func (d *decoder) decodeBudgets(n *yaml.Node, path string) {
	d.mapping(n, path, field{"webhook", d.decodeWebhook})
}

func (d *decoder) decodeWebhook(n *yaml.Node, path string) {
	w := &Webhook{Timeout: DefaultWebhookTimeout, Attempts: DefaultWebhookAttempts, Backoff: DefaultWebhookBackoff,
		MaxBackoff: DefaultWebhookMaxBackoff, Queue: DefaultWebhookQueue}
	if !d.mapping(n, path,
		field{"url", d.str(&w.URL)},
		field{"secret_env", d.str(&w.SecretEnv)},
		field{"timeout", d.duration(&w.Timeout, false)},
		field{"attempts", d.integer(&w.Attempts, 1)},
		field{"backoff", d.duration(&w.Backoff, false)},
		field{"max_backoff", d.duration(&w.MaxBackoff, false)},
		field{"queue", d.integer(&w.Queue, 1)},
	) {
		return
	}
	at := func(key string) *yaml.Node { return d.keyAt(path, key) }
	if w.URL == "" {
		d.errorf(at("url"), path+".url", "missing: where to POST the warnings")
	} else if msg := urlProblem(w.URL, "the receiver checks the signature instead"); msg != "" {
		d.errorf(at("url"), path+".url", "%s", msg)
	}
	if w.SecretEnv == "" {
		d.errorf(at("secret_env"), path+".secret_env", "missing: the environment variable holding the signing secret")
	} else {
		d.envVar(path, "secret_env", w.SecretEnv)
	}
	for _, b := range [...]struct {
		key string
		v   time.Duration
		max time.Duration
	}{{"timeout", w.Timeout, time.Minute}, {"backoff", w.Backoff, time.Hour}, {"max_backoff", w.MaxBackoff, time.Hour}} {
		if b.v > b.max {
			d.errorf(at(b.key), path+"."+b.key, "must be at most %v, got %v", b.max, b.v)
		}
	}
	if w.Backoff > w.MaxBackoff {
		d.errorf(at("backoff"), path+".backoff", "%v is longer than max_backoff %v", w.Backoff, w.MaxBackoff)
	}
	if w.Attempts > 20 {
		d.errorf(at("attempts"), path+".attempts", "must be at most 20, got %d", w.Attempts)
	}
	if w.Queue > 100_000 {
		d.errorf(at("queue"), path+".queue", "must be at most 100000, got %d", w.Queue)
	}
	d.f.Budgets.Webhook = w
}

// urlProblem says what is wrong with the URL of a server the program
// calls, or "": it must be http or https, with a host, no fragment and
// no credentials (creds says where they go instead).
func urlProblem(s, creds string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Sprintf("%q is not an http:// or https:// URL", RedactURL(s))
	case u.User != nil:
		return "must not hold credentials: " + creds
	case u.Fragment != "" || strings.HasSuffix(s, "#"):
		return "must not have a fragment"
	case len(s) > 2048:
		return "longer than 2048 bytes"
	}
	return ""
}

// keyAt returns the node of the key path.key, or of path when the key is
// absent: where an error about it points.
func (d *decoder) keyAt(path, key string) *yaml.Node {
	if k := d.lines[path+"."+key]; k != nil {
		return k
	}
	return d.lines[path]
}

// envVar reports an error at path.key unless name is an environment
// variable name.
func (d *decoder) envVar(path, key, name string) {
	if !envName(name) {
		d.errorf(d.keyAt(path, key), path+"."+key, "%q is not an environment variable name (A-Z, 0-9 and _, not starting with a digit, at most 128)", name)
	}
}

func envName(s string) bool {
	if s == "" || len(s) > 128 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// warn decodes a list of percentages ("80%"), each in [1%, 100%] and
// listed once, into ascending order.
func (d *decoder) warn(dst *[]int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		n = d.resolve(n)
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list of percentages such as [80%%, 95%%], got %s", describe(n))
			return
		}
		raw := n.Content
		for i, e := range raw {
			p := fmt.Sprintf("%s[%d]", path, i)
			s, ok := d.scalar(e, p)
			if !ok {
				continue
			}
			e = d.resolve(e)
			num, ok := strings.CutSuffix(s, "%")
			v, err := strconv.Atoi(num)
			switch {
			case !ok || err != nil:
				d.errorf(e, p, "%q is not a whole percentage (write 80%%)", s)
				continue
			case v < 1 || v > 100:
				d.errorf(e, p, "must be between 1%% and 100%%, got %s", s)
				continue
			case slices.Contains(*dst, v):
				d.errorf(e, p, "%d%% is listed twice", v)
				continue
			}
			*dst = append(*dst, v)
		}
		if len(raw) > MaxWarnings {
			d.errorf(n, path, "at most %d thresholds, got %d", MaxWarnings, len(raw))
		}
		slices.Sort(*dst)
	}
}

// budgetPolicy checks a policy's warn and soft fields against the rest of
// it: only a quota partitioned by tenant (or global) warns, and a soft
// quota runs in shadow mode and warns at 100% too.
func (d *decoder) budgetPolicy(pol *admission.Policy, info *PolicyInfo, path string) {
	_, warnGiven := d.lines[path+".warn"]
	_, softGiven := d.lines[path+".soft"]
	if !warnGiven && !softGiven {
		return
	}
	for _, key := range []string{"warn", "soft"} {
		at := d.lines[path+"."+key]
		if at == nil {
			continue
		}
		if pol.Algorithm != limits.Quota {
			d.errorf(at, path+"."+key, "only a quota warns (this policy is a %s)", pol.Algorithm)
		}
		if !budgetKey(pol.Key) {
			d.errorf(at, path+"."+key, "warnings are per tenant: the policy's key must be tenant or global")
		}
	}
	if warnGiven && len(info.Warn) == 0 && !softGiven {
		d.errorf(d.lines[path+".warn"], path+".warn", "empty: list thresholds such as [80%%, 95%%], or remove warn")
	}
	if !info.Soft {
		return
	}
	if m := d.lines[path+".mode"]; m != nil {
		d.errorf(m, path+".mode", "a soft quota never refuses: it runs in shadow mode; remove mode (or soft)")
	}
	pol.Mode = limits.Shadow
	if !slices.Contains(info.Warn, 100) {
		info.Warn = append(info.Warn, 100)
	}
}

// budgetKey reports whether a policy keyed by key has one partition per
// tenant, or one for everyone.
func budgetKey(key []limits.KeyPart) bool {
	return len(key) == 0 || len(key) == 1 && (key[0] == limits.KeyTenant || key[0] == limits.KeyGlobal)
}
