// Package dashboards generates Sluice's Grafana dashboards from Go values,
// so that queries, units and variables stay consistent across them.
//
// Three are generic: every service using the library fills them, whatever
// its policies count (Generic):
//
//   - Overview (uid sluice-overview): decisions by outcome, rejection ratio
//     per policy, the top rejected tenants, in-flight work against its cap, queue depth and wait (with exemplars
//     linked to their traces), partitions, how long permits are held,
//     store errors, fail-open events and release retries.
//   - Rollout (uid sluice-rollout): each shadow policy's would-reject ratio
//     against the rollout threshold, its top would-reject tenants, and the
//     enforced policy it would replace side by side.
//   - Tenant (uid sluice-tenant): one tenant across policies: admitted,
//     rejected, near its limit, and its policies' queue wait.
//
// Two are for LLM traffic:
//
//   - LLM (uid sluice-llm): tokens and spend admitted, estimate
//     accuracy, and tenants near their budget, for policies counting
//     tokens or cost.
//   - Provider (uid sluice-provider): the external provider behind the
//     llmproxy gateway (its learned budget per upstream store and group,
//     paused time, provider 429s absorbed vs passed through, queue wait by
//     priority class, the adaptive concurrency cap and the time to first
//     byte it follows).
//
// Every dashboard has a job and an instance variable (multi-select, All by
// default) over the Prometheus job and instance labels, and every query
// selects them and keeps job in its aggregations: two services scraped by
// one Prometheus are shown apart, never summed together.
//
// The Overview's queue wait panel asks Prometheus for exemplars and links
// each exemplar's trace_id to the trace datasource chosen in its traces
// variable (Tempo; change the variable's type for Jaeger).
//
// The JSON files next to this package are the generated output, importable
// into Grafana as they are (Dashboards → Import), with the Prometheus
// datasource chosen through the datasource variable. Regenerate them with
// `go test ./dashboards -run TestGenerated -update`; the test fails when
// they are stale.
package dashboards

import (
	"bytes"
	"encoding/json"
)

// Datasource is the datasource every panel and variable uses: the
// dashboard's datasource variable.
var Datasource = &Ref{Type: "prometheus", UID: "${datasource}"}

// Threshold is the would-reject ratio the Rollout dashboard draws, the same
// rollout gate as the AdmissionShadowWouldRejectAboveThreshold alert.
const Threshold = 0.02

// Dashboard is a Grafana dashboard, in the JSON model Grafana imports. The
// fields of Dashboard and of the types it is made of mirror that model
// (schemaVersion 39); their JSON tags give the names Grafana reads.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description"`
	Tags          []string   `json:"tags"`
	Editable      bool       `json:"editable"`
	SchemaVersion int        `json:"schemaVersion"`
	Time          TimeRange  `json:"time"`
	Refresh       string     `json:"refresh"`
	Timezone      string     `json:"timezone"`
	Templating    Templating `json:"templating"`
	Links         []Link     `json:"links"`
	Panels        []Panel    `json:"panels"`
}

// TimeRange is the dashboard's default range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Link links dashboards with a common tag.
type Link struct {
	Title       string   `json:"title"`
	Type        string   `json:"type"`
	Tags        []string `json:"tags"`
	AsDropdown  bool     `json:"asDropdown"`
	IncludeVars bool     `json:"includeVars"`
	KeepTime    bool     `json:"keepTime"`
}

// Variable is a template variable: the datasource, or a query over label
// values.
type Variable struct {
	Name        string `json:"name"`
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
	Type        string `json:"type"`
	// Query is the datasource type for a datasource variable, and a
	// label_values(selector, label) query for a query variable.
	Query      string         `json:"query"`
	Definition string         `json:"definition,omitempty"`
	Datasource *Ref           `json:"datasource,omitempty"`
	Refresh    int            `json:"refresh,omitempty"`
	Multi      bool           `json:"multi"`
	IncludeAll bool           `json:"includeAll"`
	AllValue   string         `json:"allValue,omitempty"`
	Sort       int            `json:"sort,omitempty"`
	Current    map[string]any `json:"current"`
	Options    []any          `json:"options"`
	Hide       int            `json:"hide"`
}

// Ref names a datasource.
type Ref struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel.
type Panel struct {
	ID              int              `json:"id"`
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	Description     string           `json:"description"`
	Datasource      *Ref             `json:"datasource"`
	GridPos         GridPos          `json:"gridPos"`
	Targets         []Target         `json:"targets"`
	FieldConfig     FieldConfig      `json:"fieldConfig"`
	Options         map[string]any   `json:"options"`
	Transformations []Transformation `json:"transformations,omitempty"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string `json:"refId"`
	Datasource   *Ref   `json:"datasource"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat,omitempty"`
	Instant      bool   `json:"instant"`
	Range        bool   `json:"range"`
	Format       string `json:"format"`
	// Exemplar asks Prometheus for the exemplars of the query's series
	// (trace ids of requests that fell in a bucket).
	Exemplar bool `json:"exemplar,omitempty"`
}

// FieldConfig holds a panel's unit and thresholds.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

// FieldDefaults are the field settings shared by a panel's series.
type FieldDefaults struct {
	Unit       string         `json:"unit"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	Decimals   *int           `json:"decimals,omitempty"`
	Thresholds Thresholds     `json:"thresholds"`
	Custom     map[string]any `json:"custom,omitempty"`
	Color      map[string]any `json:"color,omitempty"`
}

// Thresholds colour values and may be drawn on time series.
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Step is one threshold; the first has a nil value (from minus infinity).
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// Transformation reshapes a table panel's data.
type Transformation struct {
	ID      string         `json:"id"`
	Options map[string]any `json:"options"`
}

// JSON returns the dashboard as Grafana imports it.
func (d *Dashboard) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// All returns the dashboards: the generic ones, then LLM and Provider.
func All() []*Dashboard { return append(Generic(), LLM(), Provider()) }

// Generic returns the dashboards any service using the library fills:
// Overview, Rollout and Tenant.
func Generic() []*Dashboard { return []*Dashboard{Overview(), Rollout(), Tenant()} }

// File is the file name a dashboard is committed under.
func (d *Dashboard) File() string { return d.UID[len("sluice-"):] + ".json" }
