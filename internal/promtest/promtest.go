// Package promtest runs the real Prometheus tools in tests: promtool, and a
// prometheus server on a free loopback port with its own storage
// directory, stopped when the test ends.
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/syncbuf"
)

// InstallHint says how to get the tools; `make test` does it for you.
const InstallHint = "install it with `apt-get install -y prometheus` (Debian/Ubuntu; ships prometheus and promtool) " +
	"or run `make test`, which installs it through scripts/test-deps.sh"

// Binary returns the path of the named program (prometheus or promtool)
// on PATH, and fails the test with an install hint when it is missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found on PATH: %s", name, InstallHint)
	}
	return p
}

// Promtool runs promtool with args in dir and returns its combined
// output; a non-zero exit fails the test with that output.
func Promtool(t testing.TB, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Config is what a test server scrapes and evaluates.
type Config struct {
	// Targets are host:port addresses scraped at /metrics, as job sluice.
	Targets []string
	// Jobs are more scrape jobs: the host:port addresses of each, scraped
	// at /metrics under the job label of its key, as Prometheus scrapes
	// several services.
	Jobs map[string][]string
	// Interval is the scrape and rule evaluation interval; zero means 1s.
	Interval time.Duration
	// RuleFiles are rule file contents, written to the storage directory
	// and loaded.
	RuleFiles [][]byte
	// Exemplars starts the server with --enable-feature=exemplar-storage,
	// so that it keeps the exemplars of OpenMetrics scrapes for
	// QueryExemplars.
	Exemplars bool
}

// A Server is a running prometheus.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:port.
	URL string
	cmd *exec.Cmd
	log *syncbuf.Buffer
}

// Start runs prometheus on a free loopback port with a temporary storage
// directory and waits until it is ready. The server is stopped (by its
// process id) when the test ends; its log is printed if the test failed.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin := Binary(t, "prometheus")
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	dir := t.TempDir()
	var rules []string
	for i, r := range cfg.RuleFiles {
		p := filepath.Join(dir, fmt.Sprintf("rules-%d.yml", i))
		if err := os.WriteFile(p, r, 0o644); err != nil {
			t.Fatal(err)
		}
		rules = append(rules, p)
	}
	rulesJSON, _ := json.Marshal(rules)
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  evaluation_interval: %[1]s
rule_files: %[2]s
scrape_configs:
`, cfg.Interval, rulesJSON)
	jobs := map[string][]string{}
	maps.Copy(jobs, cfg.Jobs)
	if len(cfg.Targets) > 0 {
		jobs["sluice"] = cfg.Targets
	}
	for _, name := range slices.Sorted(maps.Keys(jobs)) {
		jobJSON, _ := json.Marshal(name)
		targets, _ := json.Marshal(jobs[name])
		conf += fmt.Sprintf(`  - job_name: %[2]s
    scrape_interval: %[1]s
    scrape_timeout: %[1]s
    static_configs:
      - targets: %[3]s
`, cfg.Interval, jobJSON, targets)
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	log := &syncbuf.Buffer{}
	args := []string{
		"--config.file=" + confPath,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--web.console.templates=" + dir, "--web.console.libraries=" + dir,
		"--log.level=warn",
	}
	if cfg.Exemplars {
		args = append(args, "--enable-feature=exemplar-storage")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	s := &Server{URL: "http://" + addr, cmd: cmd, log: log}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30s: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FreeAddr returns a free loopback address, 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Sample is one series of a query result.
type Sample struct {
	// Metric holds the series' labels.
	Metric map[string]string `json:"metric"`
	// Value is [unix time, "value"].
	Value [2]any `json:"value"`
}

// Float returns the sample's value, NaN when it is not a number.
func (s Sample) Float() float64 {
	str, _ := s.Value[1].(string)
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return f
}

// Query evaluates expr at the current time through the HTTP API and
// returns its samples; a scalar result is one sample without labels.
func (s *Server) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var out []Sample
		err := json.Unmarshal(data.Result, &out)
		return out, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(data.Result, &v)
		return []Sample{{Value: v}}, err
	}
	return nil, fmt.Errorf("query %q: result type %s", expr, data.ResultType)
}

// Exemplar is one exemplar as the API reports it.
type Exemplar struct {
	// Labels are the exemplar's own labels (trace_id, span_id).
	Labels map[string]string `json:"labels"`
	// Value is the measurement, as a string.
	Value string `json:"value"`
}

// SeriesExemplars are the exemplars of one series.
type SeriesExemplars struct {
	// SeriesLabels are the series' labels, __name__ included.
	SeriesLabels map[string]string `json:"seriesLabels"`
	Exemplars    []Exemplar        `json:"exemplars"`
}

// QueryExemplars returns the exemplars of the series expr selects over
// the last hour (the server must have been started with Exemplars).
func (s *Server) QueryExemplars(ctx context.Context, expr string) ([]SeriesExemplars, error) {
	now := time.Now()
	q := url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)},
		"end":   {strconv.FormatInt(now.Add(time.Minute).Unix(), 10)},
	}
	var out []SeriesExemplars
	err := s.get(ctx, "/api/v1/query_exemplars", q, &out)
	return out, err
}

// Alert is an alert as the API reports it.
type Alert struct {
	// Labels and Annotations are the alert's, after templating.
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	// State is pending or firing.
	State string `json:"state"`
	// Value is the expression's value when the alert became active.
	Value string `json:"value"`
}

// Alerts returns the pending and firing alerts.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	err := s.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

func (s *Server) get(ctx context.Context, path string, q url.Values, into any) error {
	u := s.URL + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %s: %w", path, body, err)
	}
	if env.Status != "success" {
		return errors.New(path + ": " + env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

// RuleState is a loaded rule as the API reports it.
type RuleState struct {
	// Name is the recorded series or the alert's name.
	Name string `json:"name"`
	// Health is ok, err or unknown (not evaluated yet).
	Health string `json:"health"`
	// LastError is the last evaluation's error.
	LastError string `json:"lastError"`
	// Type is recording or alerting.
	Type string `json:"type"`
}

// Rules returns every loaded rule with its evaluation health.
func (s *Server) Rules(ctx context.Context) ([]RuleState, error) {
	var data struct {
		Groups []struct {
			Rules []RuleState `json:"rules"`
		} `json:"groups"`
	}
	if err := s.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []RuleState
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}
