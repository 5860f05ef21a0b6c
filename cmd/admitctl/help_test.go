package main

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenFile(t, filepath.Join("testdata", name), got)
}

// goldenFile compares got with the file at path, or rewrites it with
// -update.
func goldenFile(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output:\n%s\nwant (%s):\n%s", got, path, want)
	}
}

// TestHelp: "admitctl help CMD" prints the command's synopsis, summary and
// every flag with its default on stdout, the same text as "CMD -h" prints
// on stderr, and exits 0.
func TestHelp(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 4 {
		t.Fatalf("commands = %v; want check, hash-key, loadgen and replay at least", names)
	}
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			code, out, errs := runArgs("", "help", n)
			if code != 0 || errs != "" {
				t.Fatalf("help %s = %d, stderr %q; want 0 and nothing", n, code, errs)
			}
			golden(t, "help_"+n+".golden", out)
			code, hout, herrs := runArgs("", n, "-h")
			if code != 0 || hout != "" || herrs != out {
				t.Errorf("%s -h = %d, stdout %q, stderr:\n%s\nwant 0 and help's text on stderr", n, code, hout, herrs)
			}
		})
	}
	if code, _, errs := runArgs("", "help", "frobnicate"); code != 2 || errs == "" {
		t.Errorf("help of an unknown command = %d, %q; want 2 and the command list", code, errs)
	}
}
