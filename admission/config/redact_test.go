package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://hooks.example.com/sluice", "https://hooks.example.com/sluice"},
		{"https://alice:hunter2pw@hooks.example.com/x", "https://alice:xxxxx@hooks.example.com/x"},
		{"redis://:hunter2pw@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		// Malformed: redacted by hand, up to the last "@".
		{"http://alice:hunter2pw@127.0.0.1:9x/", "http://alice:xxxxx@127.0.0.1:9x/"},
		{"http://alice:hun@ter2pw@[::1/", "http://alice:xxxxx@[::1/"},
		{"http://alice:hunter/2pw@host:9x", "http://alice:xxxxx@host:9x"},
		{"postgres://alice:hunter2pw@%zz/db", "postgres://alice:xxxxx@%zz/db"},
		{"alice:hunter2pw@127.0.0.1:6379", "alice:xxxxx@127.0.0.1:6379"},
		{"http://127.0.0.1:9x/", "http://127.0.0.1:9x/"},
		// A password with "/" or "?" that url.Parse reads as a port.
		{"https://alice:1234/ab==@host/", "https://alice:xxxxx@host/"},
		{"https://alice:1234?ab@host/", "https://alice:xxxxx@host/"},
	} {
		if got := config.RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// secretURL is a malformed URL (its port is not a number) holding a
// password that no output may show.
const (
	secret    = "hunter2pw"
	secretURL = "http://alice:" + secret + "@127.0.0.1:9x/"
)

// TestURLErrorsRedacted: a malformed URL with credentials in each
// URL-typed field of a policy file (budgets.webhook.url) is refused with
// an error that names the field and shows the URL without its password,
// read from a string or from disk.
func TestURLErrorsRedacted(t *testing.T) {
	doc := "policies:\n  - {name: spend, key: tenant, unit: cost, algorithm: quota, period: month, limit: 500M, warn: [80%]}\n" +
		"budgets:\n  webhook: {url: \"" + secretURL + "\", secret_env: SLUICE_WEBHOOK_SECRET}\n"
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, perr := config.Parse("p.yaml", []byte(doc))
	_, lerr := config.Load(path)
	for _, err := range []error{perr, lerr} {
		if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), `budgets.webhook.url: "http://alice:xxxxx@127.0.0.1:9x/" is not an http:// or https:// URL`) {
			t.Errorf("error = %v; want the URL refused with its password redacted", err)
		}
	}
}
