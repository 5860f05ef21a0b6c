// Command admitctl is the Sluice command line: it checks policy files,
// hashes API keys for them, and hosts the operator tools (replaying a
// request log against candidate policies, generating multi-tenant load).
//
// Usage:
//
//	admitctl check [-q] FILE   validate a policy file (naming the valid value nearest to a typo),
//	                           warn of settings that defeat a limit, print the effective policies per plan
//	admitctl hash-key [KEY]    print the stored form of an API key (reads stdin without KEY)
//	admitctl replay --log FILE --config A.yaml [--config B.yaml ...] [--strict]
//	                           replay a request log against candidate policy files and compare;
//	                           malformed lines are named and skipped (--strict: the first one stops)
//	admitctl loadgen [flags]   generate multi-tenant traffic as a request log, or send it as HTTP
//	admitctl prices [--config FILE] [--request-log FILE]
//	                           list the built-in prices with each entry's provider page and month;
//	                           with a request log, the models seen that have no price
//	admitctl db SUBCOMMAND     manage the tenant directory in PostgreSQL: migrate, tenants, plans,
//	                           overrides, keys (created once, stored hashed, revoked), export, import
//	admitctl help [COMMAND]    list the commands, or print one's synopsis and every flag
//
// Exit status: 0 on success, 1 when the file (or the work) failed, 2 on a
// usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// A command is one subcommand. Each lives in its own file and registers
// itself in an init function, so new ones are added without touching this
// file.
type command struct {
	name    string
	usage   string // the argument synopsis, e.g. "FILE"
	summary string
	// run defines the command's flags on fs, parses args with parse and
	// does the work. fs's usage is the command's help: the synopsis, the
	// summary and every flag.
	run func(ctx context.Context, env *env, fs *flag.FlagSet, args []string) int
}

// env is what a command reads and writes.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// transport, when not nil, carries loadgen's requests instead of a
	// new http.Transport (tests answer them in memory).
	transport http.RoundTripper
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("admitctl: command " + c.name + " registered twice")
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit status.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return 2
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		if len(args) == 1 {
			usage(e.stdout)
			return 0
		}
		c, ok := commands[args[1]]
		if !ok {
			fmt.Fprintf(e.stderr, "admitctl help: unknown command %q\n\n", args[1])
			usage(e.stderr)
			return 2
		}
		// The command's own -h, on stdout: one text for both ways of asking.
		out := &env{stdin: e.stdin, stdout: e.stdout, stderr: e.stdout}
		return c.run(ctx, out, c.flagSet(out), []string{"-h"})
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "admitctl: unknown command %q\n\n", name)
		usage(e.stderr)
		return 2
	}
	return c.run(ctx, e, c.flagSet(e), args[1:])
}

// flagSet returns an empty flag set for the command, writing to e.stderr,
// whose usage is the command's help.
func (c *command) flagSet(e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: admitctl %s %s\n\n%s\n", c.name, c.usage, c.summary)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args into fs. When it reports false the command returns
// code at once: 0 after -h (the help is printed), 2 after a bad flag (the
// flag package has said which, and printed the help).
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: admitctl COMMAND [ARGS]; admitctl help COMMAND prints a command's flags")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "\n  %s %s\n      %s\n", c.name, c.usage, c.summary)
	}
}
