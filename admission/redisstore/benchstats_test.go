package redisstore_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/benchcpu"
	"github.com/sluicehq/sluice/internal/redistest"
)

// serverMeter adds the server's side of a benchmark to its metrics:
// srv-cpu-ns/op, the redis-server process's CPU time per operation (INFO
// cpu), and script-µs/op, the time the server spent in scripts per
// operation (INFO commandstats of EVALSHA and EVAL),
// next to the client's cpu-ns/op.
type serverMeter struct {
	addr string
	cpu  float64
	cli  benchcpu.Clock
}

func startServerMeter(b *testing.B, addr string) *serverMeter {
	b.Helper()
	if _, err := redistest.Do(addr, "CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	m := &serverMeter{addr: addr, cpu: serverCPU(b, addr)}
	m.cli = benchcpu.Start()
	return m
}

func (m *serverMeter) report(b *testing.B) {
	b.Helper()
	m.cli.Report(b)
	if b.N == 0 {
		return
	}
	b.ReportMetric((serverCPU(b, m.addr)-m.cpu)*1e9/float64(b.N), "srv-cpu-ns/op")
	stats, err := redistest.Do(m.addr, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var usec, cmds float64
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		field := "calls="
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval":
			field = "usec="
		case "cmdstat_info", "cmdstat_config", "cmdstat_hello", "cmdstat_client", "cmdstat_ping", "cmdstat_script":
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, found := strings.CutPrefix(f, field); found {
				x, _ := strconv.ParseFloat(v, 64)
				if field == "usec=" {
					usec += x
				} else {
					cmds += x
				}
			}
		}
	}
	b.ReportMetric(usec/float64(b.N), "script-µs/op")
	b.ReportMetric(cmds/float64(b.N), "cmds/op")
}

// serverCPU returns the server's CPU time in seconds.
func serverCPU(b *testing.B, addr string) float64 {
	b.Helper()
	info, err := redistest.Do(addr, "INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var t float64
	for _, line := range strings.Split(info, "\n") {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			x, _ := strconv.ParseFloat(v, 64)
			t += x
		}
	}
	return t
}
