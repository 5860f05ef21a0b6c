// Package testproc holds what the test servers of internal/redistest and
// internal/pgtest share: a free loopback port to start a server on, and
// the end of a failed server's output for the error that reports it.
package testproc

import (
	"net"
	"strings"
)

// FreePort returns a loopback TCP port that was free when it returned.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LastLines returns the last n lines of a process's output s, joined by
// " | " to fit in one error message.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
