// Package redistest starts real redis-server processes for tests: a single
// node or a three-node Cluster on free loopback ports, with persistence off,
// stopped by PID when the test ends.
//
// The tests that use it need redis-server and redis-cli on PATH. The
// repository's test command (`make test`) installs them; elsewhere,
// `apt-get install redis-server redis-tools` does.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testproc"
)

const installHint = "run `make test` (it installs the test dependencies) or `apt-get install -y redis-server redis-tools`"

// Server is one redis-server process listening on a loopback port.
type Server struct {
	// Addr is host:port of the server.
	Addr string
	// Port is its TCP port.
	Port int

	dir    string
	conf   string // configuration file, for a Sentinel
	ownDir bool
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
	extra  []string
}

// Binary returns the path of redis-server, failing tb with instructions to
// install it when it is missing.
func Binary(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server is not installed: %s", installHint)
	}
	return p
}

// Start starts a redis-server on a free loopback port with persistence off
// (no save points, appendonly no) and returns once it answers PING. Extra
// arguments are passed to the server. The server is stopped, by its PID,
// when the test ends; when redis-server is not installed, the test fails
// with instructions.
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	Binary(tb)
	s := &Server{dir: tb.TempDir(), extra: extra}
	if err := s.launch(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors master under name (quorum 1), and returns once it answers PING.
// It is stopped, by its PID, when the test ends.
func StartSentinel(tb testing.TB, master *Server, name string) *Server {
	tb.Helper()
	Binary(tb)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\n", name, master.Port, name)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	s := &Server{dir: dir, conf: conf, extra: []string{"--sentinel"}}
	if err := s.launch(); err != nil {
		tb.Fatalf("redistest: sentinel: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Launch is Start for code without a testing.TB (runnable examples): the
// caller stops the server with Stop and removes nothing else (its files
// live in a temporary directory that Stop deletes).
func Launch() (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server is not installed: %s", installHint)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, ownDir: true}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// launch starts s on a free port, trying a few ports.
func (s *Server) launch() error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port, err = freePort(hasClusterFlag(s.extra))
		if err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(); err == nil {
			return nil
		}
	}
	return err
}

func hasClusterFlag(args []string) bool {
	for _, a := range args {
		if a == "--cluster-enabled" {
			return true
		}
	}
	return false
}

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--daemonize", "no",
	}
	args = append(args, s.extra...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		log.Close()
		return fmt.Errorf("redis-server is not installed: %s", installHint)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = s.dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.log, s.exited = cmd, log, exited
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, testproc.LastLines(string(out), 5))
		default:
		}
		if r, err := Do(s.Addr, "PING"); err == nil && r == "PONG" {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.Port)
}

// PID returns the process id of the running server, or 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}

	return s.cmd.Process.Pid
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// until its port is closed.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited, log := s.cmd, s.exited, s.log
	s.cmd, s.log = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill() // SIGKILL to this server's PID
	<-exited
	log.Close()
}

// Restart starts the server again on the same port (after Kill), with an
// empty data set.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	var err error
	for i := 0; i < 50; i++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("redistest: restart: %v", err)
}

// Pause makes the server hold every script call and write command of its
// clients, unanswered, until Unpause (CLIENT PAUSE WRITE, for ten minutes
// at most): the calls of a store, whose scripts all write, wait as they
// would on a paused or overloaded server. It is CLIENT PAUSE's WRITE mode
// rather than ALL because ALL holds CLIENT UNPAUSE too (Redis 7.0), so
// that only the clock could end the pause; with WRITE, the test ends it
// when it decides.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	if _, err := Do(s.Addr, "CLIENT", "PAUSE", "600000", "WRITE"); err != nil {
		tb.Fatalf("redistest: CLIENT PAUSE: %v", err)
	}
}

// Unpause ends a Pause: the calls held are served, in order, and new ones
// at once.
func (s *Server) Unpause(tb testing.TB) {
	tb.Helper()
	if _, err := Do(s.Addr, "CLIENT", "UNPAUSE"); err != nil {
		tb.Fatalf("redistest: CLIENT UNPAUSE: %v", err)
	}
}

// Stop kills the server; it is registered with t.Cleanup by Start.
func (s *Server) Stop() {
	s.Kill()
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// Do sends one command to addr over a fresh connection and returns the
// reply as text: simple strings, bulk strings and integers as they are,
// arrays joined by newlines. A Redis error reply is returned as an error.
func Do(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// freePort returns a loopback port that is free; with bus set, port+10000
// (the Cluster bus port) is free too.
func freePort(bus bool) (int, error) {
	for i := 0; i < 20; i++ {
		port, err := testproc.FreePort()
		if err != nil {
			return 0, err
		}
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		lb.Close()
		return port, nil
	}
	return 0, errors.New("no free port")
}

// Cluster is a Redis Cluster of masters on loopback ports.
type Cluster struct {
	// Addrs are the nodes' host:port addresses.
	Addrs []string
	// Servers are the nodes, in the order of Addrs.
	Servers []*Server
}

// StartCluster starts n (at least 3) cluster-enabled servers, joins them
// with `redis-cli --cluster create` (no replicas) and returns once every
// node reports cluster_state:ok. The servers stop when the test ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redis-cli is not installed: %s", installHint)
	}
	c := &Cluster{}
	for i := 0; i < n; i++ {
		s := Start(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		c.Servers = append(c.Servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v: %s", err, testproc.LastLines(string(out), 5))
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range c.Addrs {
		for {
			info, err := Do(a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ready: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}
