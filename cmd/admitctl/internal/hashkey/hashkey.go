// Package hashkey prints the stored form of an API key. It is shared by
// admitctl's hash-key command and the hashkey program, a main package
// that imports nothing but admission/apikey (the standard library) so
// that a service's module can run it with the go.sum entries it already
// has.
package hashkey

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/admission/apikey"
)

// Run parses args with fs (a key beginning with - goes after --), reads
// the key from stdin when args hold none, prints its stored form
// (sha256:...) on stdout and its id in logs and metrics on stderr, and
// returns the exit code: 0 done, 2 usage or no key.
func Run(fs *flag.FlagSet, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	args = fs.Args()
	var key string
	switch len(args) {
	case 0:
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && line == "" {
			fmt.Fprintln(stderr, "admitctl hash-key: no key on stdin")
			return 2
		}
		key = strings.TrimRight(line, "\r\n")
	case 1:
		key = args[0]
	default:
		fs.Usage()
		return 2
	}
	if key == "" {
		fmt.Fprintln(stderr, "admitctl hash-key: empty key")
		return 2
	}
	h := apikey.Sum(key)
	fmt.Fprintln(stdout, h.String())
	fmt.Fprintf(stderr, "key id in logs and metrics: %s\n", h.ID())
	return 0
}
