package config_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
)

const deploymentsPolicy = "policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 10, per: 1m}\n"

// The deployments section maps each deployment, whatever the case it is
// asked in, to its model, and keeps the name as the file writes it.
func TestDeployments(t *testing.T) {
	f, err := config.Parse("d.yaml", []byte(deploymentsPolicy+`
deployments:
  Prod-Chat: {model: gpt-4o-mini}
  embed.v2: {model: text-embedding-3-small}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ask, name, model string }{
		{"prod-chat", "Prod-Chat", "gpt-4o-mini"},
		{"PROD-CHAT", "Prod-Chat", "gpt-4o-mini"},
		{"embed.v2", "embed.v2", "text-embedding-3-small"},
	} {
		if d, ok := f.Deployments.Lookup(tc.ask); !ok || d.Name != tc.name || d.Model != tc.model {
			t.Errorf("Lookup(%q) = %+v, %v; want %s running %s", tc.ask, d, ok, tc.name, tc.model)
		}
	}
	if d, ok := f.Deployments.Lookup("other"); ok {
		t.Errorf("Lookup(other) = %+v; want none", d)
	}
}

// Every broken entry is refused, each with its path.
func TestDeploymentsBroken(t *testing.T) {
	many := "deployments:\n"
	for i := range config.MaxDeployments + 1 {
		many += "  d" + strconv.Itoa(i) + ": {model: gpt-4o}\n"
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"slash", "deployments:\n  a/b: {model: gpt-4o}\n", "deployments.a/b: not a deployment name"},
		{"dot dot", "deployments:\n  ..: {model: gpt-4o}\n", "not a deployment name"},
		{"long", "deployments:\n  " + strings.Repeat("d", 65) + ": {model: gpt-4o}\n", "not a deployment name"},
		{"case duplicate", "deployments:\n  chat: {model: gpt-4o}\n  CHAT: {model: gpt-4o-mini}\n", "duplicates deployments.chat"},
		{"no model", "deployments:\n  chat: {}\n", "deployments.chat.model: missing"},
		{"bad model", "deployments:\n  chat: {model: \"gpt 4o\"}\n", "deployments.chat.model: not a model name"},
		{"unknown key", "deployments:\n  chat: {model: gpt-4o, version: 1}\n", "deployments.chat.version"},
		{"not a mapping", "deployments:\n  chat: gpt-4o\n", "deployments.chat: expected a mapping"},
		{"too many", many, "at most 1024"},
	} {
		_, err := config.Parse("d.yaml", []byte(deploymentsPolicy+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
}
