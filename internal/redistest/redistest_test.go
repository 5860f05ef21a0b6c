package redistest

import (
	"strconv"
	"strings"
	"testing"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if r, err := Do(s.Addr, "SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET = %q, %v; want OK", r, err)
	}
	if r, _ := Do(s.Addr, "CONFIG", "GET", "save"); !strings.HasSuffix(r, "\n") {
		t.Errorf("CONFIG GET save = %q; want an empty save setting", r)
	}
	pid := s.PID()
	s.Kill()
	if _, err := Do(s.Addr, "PING"); err == nil {
		t.Fatalf("server %d still answers after Kill", pid)
	}
	s.Restart(t)
	if r, err := Do(s.Addr, "GET", "k"); err != nil || r != "" {
		t.Fatalf("GET after restart = %q, %v; want an empty data set", r, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs) != 3 {
		t.Fatalf("%d nodes; want 3", len(c.Addrs))
	}
	info, err := Do(c.Addrs[0], "CLUSTER", "INFO")
	if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO = %q, %v; want 3 known nodes", info, err)
	}
}

func TestSentinel(t *testing.T) {
	m := Start(t)
	s := StartSentinel(t, m, "main")
	addr, err := Do(s.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main")
	if err != nil || addr != "127.0.0.1\n"+strconv.Itoa(m.Port) {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME = %q, %v; want the master", addr, err)
	}
}
