// Package mdcheck checks the relative links of Markdown files: every link
// to a file of the repository names a file or directory that exists, and
// every anchor (`#section`, `file.md#section`) names a heading of the file
// it points into, by GitHub's rules for heading anchors.
//
// Its test walks the whole repository, so `go test ./...` fails with the
// file, line and target of a broken link. Links with a scheme (https:,
// mailto:) are not fetched; links inside code blocks and code spans are
// not links.
package mdcheck

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// A Problem is one link that does not resolve.
type Problem struct {
	// File is the Markdown file holding the link, relative to the root
	// given to Check; Line is its line number, from 1.
	File string
	Line int
	// Target is the link's destination as written.
	Target string
	// Reason says what is missing.
	Reason string
}

// String formats the problem as "file:line: target: reason".
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:[^>]*\s)?(?:id|name)="([^"]+)"`)
	// inlineLink matches the destination of [text](dest) and
	// ![alt](dest), with an optional title.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^()\s<>]*)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDef matches a reference definition: [label]: dest.
	refDef       = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s<>]+)>?`)
	inlineLinkMD = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	scheme       = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// line is one line of a Markdown file outside fenced code blocks: raw as
// written, text with its code spans blanked.
type line struct {
	n         int
	raw, text string
}

// prose returns the lines of src outside fenced code blocks, with the
// content of code spans replaced by spaces.
func prose(src []byte) []line {
	var out []line
	var fence string // the opening fence while inside a block
	for i, text := range strings.Split(string(src), "\n") {
		n := i + 1
		text = strings.TrimSuffix(text, "\r")
		// A fence may be indented as far as the list item holding it.
		trimmed := strings.TrimLeft(text, " \t")
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			run := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, trimmed[:1]))]
			switch {
			case fence == "":
				fence = run
				continue
			case run[0] == fence[0] && len(run) >= len(fence) && strings.TrimSpace(trimmed[len(run):]) == "":
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		out = append(out, line{n: n, raw: text, text: blankCodeSpans(text)})
	}
	return out
}

// blankCodeSpans replaces the content of each code span of s (text between
// two equal runs of backticks) by spaces, so that nothing in it reads as a
// link; the backticks stay.
func blankCodeSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(b) && b[j] == '`' {
			j++
		}
		run := string(b[i:j])
		end := strings.Index(string(b[j:]), run)
		if end < 0 {
			i = j
			continue
		}
		for k := j; k < j+end; k++ {
			b[k] = ' '
		}
		i = j + end + len(run)
	}
	return string(b)
}

// Slug returns the anchor GitHub gives a heading whose text is heading
// (before duplicates are numbered): the text as rendered (code spans,
// emphasis markers and link destinations dropped), lower-cased, every
// character other than a letter, a digit, a space, '-' or '_' removed,
// and each space turned into '-'.
func Slug(heading string) string {
	heading = inlineLinkMD.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of a Markdown document: one per ATX heading
// outside code blocks, by Slug, a repeated one suffixed -1, -2, ... as
// GitHub does, and the id or name of every HTML <a> element.
func Anchors(src []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(src) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			anchors[m[1]] = true
		}
		// The anchor needs the text of code spans: read the raw line.
		m := atxHeading.FindStringSubmatch(l.raw)
		if m == nil {
			continue
		}
		slug := Slug(m[1])
		a := slug
		if k := seen[slug]; k > 0 {
			a = slug + "-" + strconv.Itoa(k)
		}
		seen[slug]++
		anchors[a] = true
	}
	return anchors
}

// A link is one link destination on a line.
type link struct {
	line   int
	target string
}

// links returns the link destinations of a Markdown document, in order.
func links(src []byte) []link {
	var out []link
	for _, l := range prose(src) {
		if m := refDef.FindStringSubmatch(l.text); m != nil {
			out = append(out, link{l.n, m[1]})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(l.text, -1) {
			out = append(out, link{l.n, m[1]})
		}
	}
	return out
}

// Check reads every Markdown file under root (the .git directory left
// out) and returns the relative links that do not resolve, sorted by file
// and line. A target that starts with '/' is taken from root, as GitHub
// takes it from the repository's root.
func Check(root string) ([]Problem, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = Anchors(src)
		return anchors[path], nil
	}
	var problems []Problem
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, file)
		if err != nil {
			return nil, err
		}
		for _, l := range links(src) {
			reason, err := resolve(root, file, l.target, anchorsOf)
			if err != nil {
				return nil, err
			}
			if reason != "" {
				problems = append(problems, Problem{File: filepath.ToSlash(rel), Line: l.line, Target: l.target, Reason: reason})
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool {
		if problems[i].File != problems[j].File {
			return problems[i].File < problems[j].File
		}
		return problems[i].Line < problems[j].Line
	})
	return problems, nil
}

// resolve says why target, a link in file, does not resolve, or returns
// "" when it does or is not relative.
func resolve(root, file, target string, anchorsOf func(string) (map[string]bool, error)) (string, error) {
	if target == "" || scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "", nil
	}
	path, frag, _ := strings.Cut(target, "#")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	dest := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			dest = filepath.Join(root, filepath.FromSlash(path))
		} else {
			dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		}
		info, err := os.Stat(dest)
		if err != nil {
			return "no such file or directory", nil
		}
		if info.IsDir() {
			if frag != "" {
				return "an anchor into a directory", nil
			}
			return "", nil
		}
		if rel, err := filepath.Rel(root, dest); err != nil || strings.HasPrefix(rel, "..") {
			return "outside the repository", nil
		}
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return "", nil
	}
	a, err := anchorsOf(dest)
	if err != nil {
		return "", err
	}
	if !a[frag] {
		return fmt.Sprintf("no heading with anchor #%s in %s", frag, filepath.Base(dest)), nil
	}
	return "", nil
}
