package mdcheck_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/mdcheck"
)

// repoRoot is the repository's root: two directories above this file.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller: no file")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the repository root %s: %v", root, err)
	}
	return root
}

// TestRepositoryLinks checks every relative link and anchor of every
// Markdown file of the repository resolves.
func TestRepositoryLinks(t *testing.T) {
	problems, err := mdcheck.Check(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("broken link: %s", p)
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"Rollout: from shadow to enforce", "rollout-from-shadow-to-enforce"},
		{"Protecting the provider's limits", "protecting-the-providers-limits"},
		{"Configuration: envoyproxy/ratelimit's files, as they are", "configuration-envoyproxyratelimits-files-as-they-are"},
		{"Anthropic's Messages API", "anthropics-messages-api"},
		{"`admission/limits` and `max_hold`", "admissionlimits-and-max_hold"},
		{"Pricing — a request", "pricing--a-request"},
		{"AdmissionStoreFailover", "admissionstorefailover"},
		{"See [the docs](docs/x.md) now", "see-the-docs-now"},
		{"**Bold** 2×", "bold-2"},
		{"Größe", "größe"},
	} {
		if got := mdcheck.Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q; want %q", tc.heading, got, tc.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	src := "# Title\n\n## Setup\n\n```sh\n# not a heading\n```\n\n## Setup\n\n### Setup\n\n" +
		"<a id=\"custom\"></a>\n\n#### `Code` heading ####\n\n- item\n\n      ~~~sh\n      # in a list item's block\n      ~~~\n"
	got := mdcheck.Anchors([]byte(src))
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"code-heading", "custom", "setup", "setup-1", "setup-2", "title"}
	if !slices.Equal(keys, want) {
		t.Errorf("Anchors = %v; want %v", keys, want)
	}
}

// TestCheckReportsBrokenLinks builds a small tree with one link of each
// kind, good and broken, and checks exactly the broken ones are reported
// with their file and line.
func TestCheckReportsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/guide.md", "# Guide\n\n## Setup: first steps\n\n## Setup: first steps\n")
	write("docs/img.png", "png")
	write("README.md", strings.Join([]string{
		"# Project", // 1
		"[guide](docs/guide.md) [setup](docs/guide.md#setup-first-steps-1) [dir](docs/)", // 2
		"[missing](docs/nope.md)",                // 3
		"[bad anchor](docs/guide.md#setup)",      // 4
		"[self](#project) [self bad](#projects)", // 5
		"![img](docs/img.png \"title\") [web](https://example.com/x#y) [mail](mailto:a@b)", // 6
		"`[code](nope.md)` and ``[code](nope.md)``",                                        // 7
		"```",                 // 8
		"[fenced](nope.md)",   // 9
		"```",                 // 10
		"[ref]: docs/gone.md", // 11
		"[root](/docs/guide.md#guide) [up](../outside.md)", // 12
		"[into dir](docs/#x)",                              // 13
		"- a list item",                                    // 14
		"    ```",                                          // 15
		"    [fenced in a list](nope.md)",                  // 16
		"    ```",                                          // 17
	}, "\n")+"\n")
	problems, err := mdcheck.Check(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:3: docs/nope.md: no such file or directory",
		"README.md:4: docs/guide.md#setup: no heading with anchor #setup in guide.md",
		"README.md:5: #projects: no heading with anchor #projects in README.md",
		"README.md:11: docs/gone.md: no such file or directory",
		"README.md:12: ../outside.md: no such file or directory",
		"README.md:13: docs/#x: an anchor into a directory",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Check =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNamedTestsExist checks every test, benchmark and fuzz target the
// Markdown files name (`TestX`, `BenchmarkX`, `FuzzX`) is a function of
// some _test.go file, so that a renamed or removed test does not leave the
// documentation pointing at nothing.
func TestNamedTestsExist(t *testing.T) {
	root := repoRoot(t)
	named := regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)
	declared := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)
	funcs := map[string]bool{}
	mentions := map[string][]string{} // name -> files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, "_test.go"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range declared.FindAllStringSubmatch(string(b), -1) {
				funcs[m[1]] = true
			}
		case strings.HasSuffix(path, ".md"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			for _, name := range named.FindAllString(string(b), -1) {
				if !slices.Contains(mentions[name], rel) {
					mentions[name] = append(mentions[name], rel)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) == 0 || len(mentions) == 0 {
		t.Fatalf("found %d test functions and %d names in Markdown; want some of each", len(funcs), len(mentions))
	}
	for name, files := range mentions {
		if !funcs[name] {
			t.Errorf("%s names %s, which no _test.go file declares", strings.Join(files, ", "), name)
		}
	}
}

// TestREADMEOnAPage keeps the top-level README a page a newcomer reads
// whole; reference material belongs in docs/.
func TestREADMEOnAPage(t *testing.T) {
	const maxLines = 400
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxLines {
		t.Errorf("README.md has %d lines; want at most %d (move reference material to docs/)", n, maxLines)
	}
}
