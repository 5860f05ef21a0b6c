package config

import (
	"fmt"
	"sort"
	"strings"
)

// An Error is one problem in a policy file, located by line and column and
// by the path of the offending key (for example policies[2].burst).
type Error struct {
	File   string // the file name given to Parse or Load
	Line   int    // 1-based line, 0 when the file could not be read as YAML at all
	Column int    // 1-based column
	Path   string // the key's path, e.g. policies[2].burst or plans.basic.rpm
	Msg    string // what is wrong
}

// Error formats the problem as "file:line:column: path: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	if e.Path != "" {
		b.WriteString(": ")
		b.WriteString(e.Path)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a file, ordered by position. Parse
// returns it as its error; errors.As extracts it.
type Errors []*Error

// Error returns one problem per line.
func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the errors for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		if es[i].Column != es[j].Column {
			return es[i].Column < es[j].Column
		}
		return es[i].Path < es[j].Path
	})
}
