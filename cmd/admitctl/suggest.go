package main

import (
	"fmt"
	"regexp"
	"strings"
)

// The shapes of the policy file's errors that name a value from a closed
// set. The library words its lists in several ways; check rewrites each
// into one ("(want one of a, b, c)") and adds the nearest valid name.
var (
	// unknown key "algorythm" (want one of name, description, ...)
	unknownKeyRE = regexp.MustCompile(`^(unknown key "([^"]*)") \(want one of ([^()]+)\)$`)
	// unknown algorithm "token_buckt" (want one of [token_bucket fixed_window ...])
	unknownEnumRE = regexp.MustCompile(`^(unknown [a-z ]+ "([^"]*)") \(want one of \[([^\]]*)\]\)$`)
	// "warnn" is not debug, info, warn or error
	isNotRE = regexp.MustCompile(`^"([^"]*)" is not ([\w.-]+(?:, [\w.-]+)* or [\w.-]+)$`)
	// must be 403 or 429, got 42
	mustBeRE = regexp.MustCompile(`^must be ([\w.-]+(?:, [\w.-]+)* or [\w.-]+), got (.+)$`)
	// missing (token_bucket, fixed_window, ... or quota)
	missingRE = regexp.MustCompile(`^(missing) \(([\w.-]+(?:, [\w.-]+)* or [\w.-]+)\)$`)
	// no such policy "tenant-rmp", no policy "x", no plan "pr"
	noPolicyRE = regexp.MustCompile(`^no (?:such )?policy "([^"]*)"$`)
	noPlanRE   = regexp.MustCompile(`^no plan "([^"]*)"$`)
)

// splitNames splits "a, b, c or d" or "a b c" into its names.
func splitNames(s string) []string {
	s = strings.ReplaceAll(s, " or ", ", ")
	if !strings.Contains(s, ",") {
		return strings.Fields(s)
	}
	out := strings.Split(s, ", ")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// fileNames are the names a policy file defines, for suggestions when a
// reference to one does not resolve.
type fileNames struct {
	policies, plans []string
}

// explain rewords one problem of a policy file: lists of valid values
// written one way, with the valid value nearest to the one given.
// Messages of other shapes are returned as they are.
func explain(msg string, names fileNames) string {
	withList := func(lead, given string, valid []string) string {
		return lead + didYouMean(given, valid) + " (want one of " + strings.Join(valid, ", ") + ")"
	}
	if m := unknownKeyRE.FindStringSubmatch(msg); m != nil {
		return withList(m[1], m[2], splitNames(m[3]))
	}
	if m := unknownEnumRE.FindStringSubmatch(msg); m != nil {
		return withList(m[1], m[2], splitNames(m[3]))
	}
	if m := isNotRE.FindStringSubmatch(msg); m != nil {
		return withList(`unknown value "`+m[1]+`"`, m[1], splitNames(m[2]))
	}
	if m := mustBeRE.FindStringSubmatch(msg); m != nil {
		return withList("unknown value "+m[2], m[2], splitNames(m[1]))
	}
	if m := missingRE.FindStringSubmatch(msg); m != nil {
		return withList(m[1], "", splitNames(m[2]))
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
