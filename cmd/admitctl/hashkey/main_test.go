package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
)

// TestRunFromServiceModule runs the documented command from a service's
// module that uses the HTTP middleware: after go mod tidy, with no
// network and go.sum left read-only, hashkey builds and prints the stored
// form of the key it reads on stdin.
func TestRunFromServiceModule(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/svc\n\ngo 1.26.8\n\nrequire github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => " + root + "\n",
		"main.go": `package main

import (
	"net/http"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

func main() {
	ctl, _ := admission.New(admission.Config{})
	mw, _ := httpadmit.New(ctl)
	_ = http.ListenAndServe("127.0.0.1:8080", mw.Handler(http.NotFoundHandler()))
}
`,
		// The sums the service would have fetched; tidy keeps those it needs.
		"go.sum": string(sums),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gocmd := func(stdin string, env []string, args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"GOPROXY=off", "GOWORK=off", "GOFLAGS="}, env...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		if err := cmd.Run(); err != nil {
			t.Logf("go %s: %s", strings.Join(args, " "), errs.String())
			return "", err
		}
		return out.String(), nil
	}
	if _, err := gocmd("", []string{"GOFLAGS=-mod=mod"}, "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy in the service's module: %v", err)
	}
	out, err := gocmd("sk-example-acme-1\n", nil, "run", "github.com/sluicehq/sluice/cmd/admitctl/hashkey")
	if err != nil {
		t.Fatalf("go run github.com/sluicehq/sluice/cmd/admitctl/hashkey: %v", err)
	}
	if want := apikey.Sum("sk-example-acme-1").String() + "\n"; out != want {
		t.Errorf("hashkey < key = %q; want %q", out, want)
	}
}
