package pgtest_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestKillRestart starts a cluster of its own, kills it and restarts it on
// the same port: the data survives, and the server answers again.
func TestKillRestart(t *testing.T) {
	s := pgtest.Start(t)
	dsn := s.NewDB(t)
	ctx := context.Background()
	c := pgtest.Conn(t, dsn)
	if _, err := c.Exec(ctx, "CREATE TABLE x (v int); INSERT INTO x VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	s.Kill()
	if s.PID() != 0 {
		t.Fatalf("PID() after Kill = %d; want 0", s.PID())
	}
	if err := c.Ping(ctx); err == nil {
		t.Fatal("Ping after Kill = nil; want an error")
	}
	s.Restart(t)
	if s.PID() == 0 || s.PID() == pid {
		t.Fatalf("PID() after Restart = %d (before %d); want a new process", s.PID(), pid)
	}
	var v int
	if err := pgtest.Conn(t, dsn).QueryRow(ctx, "SELECT v FROM x").Scan(&v); err != nil || v != 7 {
		t.Fatalf("SELECT v = %d, %v; want 7", v, err)
	}
}

// TestDB gives each caller a database of its own in the shared cluster.
func TestDB(t *testing.T) {
	a, b := pgtest.DB(t), pgtest.DB(t)
	if a == b {
		t.Fatalf("DB() twice = %q; want two databases", a)
	}
	ctx := context.Background()
	if _, err := pgtest.Conn(t, a).Exec(ctx, "CREATE TABLE only_in_a (v int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Conn(t, b).Exec(ctx, "SELECT * FROM only_in_a"); err == nil {
		t.Fatal("table of database a seen in database b")
	}
}
