package httpadmit_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// TestNoFileDeps keeps the middlewares plain: a program that configures
// httpadmit (or echoadmit, or grpcadmit) in Go links neither the YAML decoder nor the
// file watcher, nor the packages that bring them (admission/config,
// admission/reload); reading and following a policy file is
// httpadmitfile's and reload's.
func TestNoFileDeps(t *testing.T) {
	const mod = "github.com/sluicehq/sluice"
	banned := []string{
		"go.yaml.in/yaml/", "gopkg.in/yaml.", "github.com/fsnotify/fsnotify",
		mod + "/admission/config", mod + "/admission/reload",
	}
	for _, pkg := range []string{mod + "/admission/httpadmit", mod + "/admission/echoadmit", mod + "/admission/grpcadmit"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 || deps[len(deps)-1] != pkg {
			t.Fatalf("go list -deps %s = %q; want its dependencies, then itself", pkg, deps)
		}
		for _, d := range deps {
			for _, b := range banned {
				if strings.HasPrefix(d, b) {
					t.Errorf("%s depends on %s; a middleware without a policy file must not link it", pkg, d)
				}
			}
		}
	}
}

// TestDefaultsOfTheFile checks that a middleware without options has the
// defaults a policy file documents, which the middleware, not linking the
// decoder, states again.
func TestDefaultsOfTheFile(t *testing.T) {
	if httpadmit.DefaultMaxBody != config.DefaultMaxBody {
		t.Errorf("max body = %d; want http.max_body's default %d", httpadmit.DefaultMaxBody, config.DefaultMaxBody)
	}
	if httpadmit.DefaultBodyTimeout != config.DefaultBodyTimeout {
		t.Errorf("body timeout = %v; want http.body_timeout's default %v", httpadmit.DefaultBodyTimeout, config.DefaultBodyTimeout)
	}
	if httpadmit.DefaultAnonymousTenant != config.DefaultAnonymousTenant {
		t.Errorf("anonymous tenant = %q; want identity.anonymous_tenant's default %q", httpadmit.DefaultAnonymousTenant, config.DefaultAnonymousTenant)
	}
}
