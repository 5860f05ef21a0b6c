package main

import (
	"fmt"
	"regexp"
	"strings"
)

// The shapes of the policy file's errors that name a value from a closed
// set, or a policy or plan of the file: check adds the nearest valid name
// to each.
var (
	// unknown key "algorythm" (want one of name, description, ...);
	// unknown level "warnn" (want one of debug, info, warn, error);
	// unknown status 492 (want one of 403, 429); missing (want one of ...)
	wantOneOfRE = regexp.MustCompile(`^(unknown [a-z ]+ (?:"([^"]*)"|(\S+))|missing) \(want one of ([^()]+)\)$`)
	// no such policy "tenant-rmp", no policy "x", no plan "pr"
	noPolicyRE = regexp.MustCompile(`^no (?:such )?policy "([^"]*)"$`)
	noPlanRE   = regexp.MustCompile(`^no plan "([^"]*)"$`)
)

// fileNames are the names a policy file defines, for suggestions when a
// reference to one does not resolve.
type fileNames struct {
	policies, plans []string
}

// explain adds to one problem of a policy file the valid value or name
// nearest to the one given. Messages of other shapes are returned as they
// are.
func explain(msg string, names fileNames) string {
	if m := wantOneOfRE.FindStringSubmatch(msg); m != nil {
		given := m[2] + m[3]
		return m[1] + didYouMean(given, strings.Split(m[4], ", ")) + " (want one of " + m[4] + ")"
	}
	if m := noPolicyRE.FindStringSubmatch(msg); m != nil {
		return msg + didYouMean(m[1], names.policies)
	}
	if m := noPlanRE.FindStringSubmatch(msg); m != nil {
		return msg + didYouMean(m[1], names.plans)
	}
	return msg
}

// didYouMean returns `; did you mean "x"?` for the valid name nearest to
// given, or "" when none is near.
func didYouMean(given string, valid []string) string {
	if s, ok := nearest(given, valid); ok {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}

// nearest returns the name of valid closest to s, ignoring case, when it
// is within a third of s's length in edits (at least one edit): a typo,
// not another word. Ties go to the first in valid.
func nearest(s string, valid []string) (string, bool) {
	if s == "" {
		return "", false
	}
	limit := max(1, len(s)/3)
	best, bestD := "", limit+1
	ls := strings.ToLower(s)
	for _, v := range valid {
		if d := editDistance(ls, strings.ToLower(v)); d < bestD {
			best, bestD = v, d
		}
	}
	return best, bestD <= limit
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// bytes, each one edit.
func editDistance(a, b string) int {
	// Three rows of the table: i-2, i-1 and i.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
