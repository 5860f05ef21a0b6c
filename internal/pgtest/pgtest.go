// Package pgtest starts real PostgreSQL servers for tests: a throwaway
// cluster made by initdb in a temporary directory, listening on a free
// loopback port, with fsync off, stopped
// by its process id when the test (or, for Shared, the test binary) ends.
//
// PostgreSQL refuses to run as root: when the test runs as root, initdb
// and the server run as the unprivileged user "postgres" (which the
// Debian package creates). The binaries are looked up on PATH, then in
// /usr/lib/postgresql/*/bin. The repository's test command (`make test`)
// installs them when missing; elsewhere `apt-get install postgresql` does.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/testproc"
)

const installHint = "run `make test` (it installs the test dependencies) or `apt-get install -y postgresql`"

// Server is one PostgreSQL cluster on a loopback port.
type Server struct {
	// Port is the server's TCP port on 127.0.0.1.
	Port int

	dir  string // the cluster's directory, removed by Stop
	cred *syscall.Credential
	bin  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start makes and starts a cluster of its own for tb, stopped when tb ends.
// It fails tb, saying how to install PostgreSQL, when it is missing.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := Launch()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

var shared struct {
	once sync.Once
	s    *Server
	err  error
	n    atomic.Int64
}

// DB returns the connection string of a new, empty database in a cluster
// shared by the tests of the binary (started on first use, stopped by
// Main), so that each test pays for a CREATE DATABASE, not an initdb.
func DB(tb testing.TB) string {
	tb.Helper()
	shared.once.Do(func() { shared.s, shared.err = Launch() })
	if shared.err != nil {
		tb.Fatalf("pgtest: %v", shared.err)
	}
	return shared.s.NewDB(tb)
}

// Main runs the tests and then stops the shared cluster: call it from
// TestMain in a package whose tests use DB.
func Main(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.Stop()
	}
	os.Exit(code)
}

// NewDB creates a new database in s and returns its connection string.
func (s *Server) NewDB(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), shared.n.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	return s.DSN(name)
}

// DSN returns the connection string of database db in s.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://sluice@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=5", s.Port, db)
}

// Launch is Start for code without a testing.TB (runnable examples): the
// caller stops the server with Stop.
func Launch() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and there is no user \"postgres\" to run the server as: %s", installHint)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.RemoveAll(s.dir)
			return nil, err
		}
	}
	data := filepath.Join(s.dir, "data")
	out, err := s.command("initdb", "-D", data, "-U", "sluice", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, testproc.LastLines(string(out), 5))
	}
	for attempt := 0; attempt < 5; attempt++ {
		if s.Port, err = testproc.FreePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	os.RemoveAll(s.dir)
	return nil, err
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL (initdb) is not installed: %s", installHint)
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// start runs the server on s.Port and waits until it accepts connections.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "server.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	if s.cred != nil {
		_ = os.Chown(logPath, int(s.cred.Uid), int(s.cred.Gid))
	}
	cmd := s.command("postgres", "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.Port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "max_connections=100", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres on port %d exited: %s", s.Port, testproc.LastLines(string(out), 5))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("postgres on port %d did not accept connections within 30s", s.Port)
}

// PID returns the server's process id, or 0 while it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill stops the server at once, by its pid (an outage: clients see their
// connections drop); Restart brings it back on the same port.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	// SIGQUIT is PostgreSQL's immediate shutdown: the postmaster tells its
	// backends to quit and exits without a checkpoint.
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts a killed server again on its port.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	_ = os.Remove(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err := s.start(); err != nil {
		tb.Fatalf("pgtest: restart: %v", err)
	}
}

// Stop stops the server by its pid and removes its directory.
func (s *Server) Stop() {
	s.kill()
	_ = os.RemoveAll(s.dir)
}

// Conn opens a connection to dsn for a test's own statements, closed
// when tb ends.
func Conn(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
