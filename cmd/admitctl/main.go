// Command admitctl is the Sluice command line: it checks policy files,
// hashes API keys for them, and hosts the operator tools (replaying a
// request log against candidate policies, generating multi-tenant load).
//
// Usage:
//
//	admitctl check FILE        validate a policy file; print the effective policies per plan
//	admitctl hash-key [KEY]    print the stored form of an API key (reads stdin without KEY)
//	admitctl replay --log FILE --config A.yaml [--config B.yaml ...]
//	                           replay a request log against candidate policy files and compare
//	admitctl loadgen [flags]   generate multi-tenant traffic as a request log, or send it as HTTP
//	admitctl help [COMMAND]
//
// Exit status: 0 on success, 1 when the file (or the work) failed, 2 on a
// usage error.
package main

import (
	"context"
	"fmt"
	"io"
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
	run     func(ctx context.Context, env *env, args []string) int
}

// env is what a command reads and writes.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
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
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fmt.Fprintf(e.stdout, "usage: admitctl %s %s\n\n%s\n", c.name, c.usage, c.summary)
				return 0
			}
		}
		usage(e.stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "admitctl: unknown command %q\n\n", name)
		usage(e.stderr)
		return 2
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: admitctl COMMAND [ARGS]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  %-28s %s\n", c.name+" "+c.usage, c.summary)
	}
}
