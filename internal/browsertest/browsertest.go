// Package browsertest runs headless Chromium for the tests of the pages
// Sluice serves and writes (the status page, the what-if report): it
// loads a page, dumps its DOM after its scripts ran or takes a
// screenshot, and finds the page's console messages in Chromium's log.
//
// A missing Chromium fails the test: scripts/test-deps.sh (run by make
// test and CI) installs Debian's chromium. Set SLUICE_SKIP_BROWSER=1 to
// skip the browser tests explicitly where it cannot be installed.
package browsertest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// SkipEnv is the variable that opts out of the browser tests.
const SkipEnv = "SLUICE_SKIP_BROWSER"

// Chromium returns the path of Chromium. When it is missing the test
// fails, or is skipped when SkipEnv is "1".
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("chromium is not installed and %s=1: the browser test is skipped", SkipEnv)
	}
	t.Fatalf("chromium is not installed: run scripts/test-deps.sh (make test does), or set %s=1 to skip the browser tests", SkipEnv)
	return ""
}

// Headless runs Chromium bin headless on url with args (--dump-dom,
// --screenshot=FILE, --window-size=W,H), in a profile of its own, and
// returns its output and its log, where the page's console messages go.
func Headless(t testing.TB, bin, url string, args ...string) (stdout, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--enable-logging=stderr", "--v=0", "--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errs.String())
	}
	return out.String(), errs.String()
}

// consoleRE matches a console message in Chromium's log: an uncaught
// error or anything a script logged.
var consoleRE = regexp.MustCompile(`(?m)^.*:CONSOLE[:(].*$`)

// Console returns the page's console messages found in Chromium's log.
func Console(log string) []string { return consoleRE.FindAllString(log, -1) }
