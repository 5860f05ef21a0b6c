package dashboards

import "strings"

// builder lays panels out on the grid and numbers them.
type builder struct {
	d    *Dashboard
	x, y int
	rowH int
}

// svc selects the series of the services and replicas the job and
// instance variables choose; every query's selectors start with it.
const svc = `job=~"$job",instance=~"$instance"`

// newDashboard starts a dashboard whose variables are the Prometheus
// datasource, the job and the instance (both over the series of
// jobMetric, a selector whose series every service the dashboard is for
// exports), then vars.
func newDashboard(uid, title, desc, jobMetric string, vars ...Variable) *builder {
	d := &Dashboard{
		UID: uid, Title: title, Description: desc,
		Tags:          []string{"sluice", "admission"},
		Editable:      true,
		SchemaVersion: 39,
		Time:          TimeRange{From: "now-1h", To: "now"},
		Refresh:       "30s",
		Timezone:      "browser",
		Links: []Link{{Title: "Sluice", Type: "dashboards", Tags: []string{"sluice"},
			AsDropdown: true, IncludeVars: false, KeepTime: true}},
	}
	d.Templating.List = append([]Variable{{
		Name: "datasource", Label: "Datasource", Type: "datasource", Query: "prometheus",
		Description: "The Prometheus that scrapes Sluice's /metrics.",
		Current:     map[string]any{}, Options: []any{},
	},
		labelVar("job", "Job", "The services to show (Prometheus job label): a Prometheus scraping several services shows one at a time, or all side by side.", jobMetric, "job", true),
		labelVar("instance", "Instance", "The replicas of the chosen services to show (Prometheus instance label).", withSelector(jobMetric, `job=~"$job"`), "instance", true),
	}, vars...)
	return &builder{d: d}
}

// withSelector adds the matchers sel to the selector metric (a metric
// name, with or without matchers of its own).
func withSelector(metric, sel string) string {
	if rest, ok := strings.CutSuffix(metric, "}"); ok {
		return rest + "," + sel + "}"
	}
	return metric + "{" + sel + "}"
}

// traces is the variable naming the trace datasource (Tempo, or Jaeger
// once its type is changed) that exemplar links open.
var traces = Variable{
	Name: "traces", Label: "Traces", Type: "datasource", Query: "tempo",
	Description: "The trace datasource (Tempo; for Jaeger, change this variable's type) whose traces the exemplars of latency panels link to. Exemplars carry trace_id; their link opens that trace here.",
	Current:     map[string]any{}, Options: []any{},
}

// traceLinks makes p draw the exemplars of its targets marked exemplar
// and link each one's trace_id to that trace in the traces datasource.
func traceLinks(p Panel) Panel {
	p.FieldConfig.Overrides = append(p.FieldConfig.Overrides, map[string]any{
		"matcher": map[string]any{"id": "byName", "options": "trace_id"},
		"properties": []any{map[string]any{"id": "links", "value": []any{map[string]any{
			"title": "Trace ${__value.raw}", "url": "",
			"internal": map[string]any{
				"datasourceUid": "${traces}", "datasourceName": "Traces",
				"query": map[string]any{"query": "${__value.raw}", "queryType": "traceql"},
			},
		}}}},
	})
	return p
}

// exemplars marks t to fetch the exemplars of its series.
func exemplars(t Target) Target {
	t.Exemplar = true
	return t
}

// labelVar is a variable over the values of label in metric's series.
func labelVar(name, label, desc, metric, labelName string, multi bool) Variable {
	v := Variable{
		Name: name, Label: label, Description: desc, Type: "query", Datasource: Datasource,
		Query:      "label_values(" + metric + ", " + labelName + ")",
		Definition: "label_values(" + metric + ", " + labelName + ")",
		Refresh:    2, Sort: 1, Multi: multi, IncludeAll: multi,
		Current: map[string]any{}, Options: []any{},
	}
	if multi {
		v.AllValue = ".*"
		v.Current = map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}
	}
	return v
}

// add places a panel w columns wide and h rows high, wrapping to a new
// row when the current one is full.
func (b *builder) add(w, h int, p Panel) {
	if b.x+w > 24 {
		b.x, b.y = 0, b.y+b.rowH
		b.rowH = 0
	}
	p.ID = len(b.d.Panels) + 1
	p.Datasource = Datasource
	p.GridPos = GridPos{H: h, W: w, X: b.x, Y: b.y}
	for i := range p.Targets {
		p.Targets[i].RefID = string(rune('A' + i))
		p.Targets[i].Datasource = Datasource
	}
	if p.FieldConfig.Overrides == nil {
		p.FieldConfig.Overrides = []any{}
	}
	if p.FieldConfig.Defaults.Thresholds.Mode == "" {
		p.FieldConfig.Defaults.Thresholds = Thresholds{Mode: "absolute", Steps: []Step{{Color: "green"}}}
	}
	b.x += w
	b.rowH = max(b.rowH, h)
	b.d.Panels = append(b.d.Panels, p)
}

// series is a range query drawn over time.
func series(expr, legend string) Target {
	return Target{Expr: strings.TrimSpace(expr), LegendFormat: legend, Range: true, Format: "time_series"}
}

// instant is a query evaluated once at the end of the range, for tables
// and stats.
func instant(expr, legend string) Target {
	return Target{Expr: strings.TrimSpace(expr), LegendFormat: legend, Instant: true, Format: "table"}
}

func timeseries(title, desc, unit string, targets ...Target) Panel {
	return Panel{
		Type: "timeseries", Title: title, Description: desc, Targets: targets,
		FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit, Custom: map[string]any{
			"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false,
		}}},
		Options: map[string]any{
			"legend":  map[string]any{"displayMode": "table", "placement": "bottom", "showLegend": true, "calcs": []string{"mean", "max", "lastNotNull"}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		},
	}
}

// table is an instant table of tenants (or other labels) sorted by value,
// the most first, with the time column hidden.
func table(title, desc, unit string, target Target) Panel {
	return Panel{
		Type: "table", Title: title, Description: desc, Targets: []Target{target},
		FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit, Custom: map[string]any{"align": "auto"}}},
		Options: map[string]any{
			"showHeader": true,
			"sortBy":     []map[string]any{{"displayName": "Value", "desc": true}},
		},
		Transformations: []Transformation{{ID: "organize", Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true}, "renameByName": map[string]string{},
		}}},
	}
}

func stat(title, desc, unit string, target Target) Panel {
	return Panel{
		Type: "stat", Title: title, Description: desc, Targets: []Target{target},
		FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit}},
		Options: map[string]any{
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"colorMode":     "value", "graphMode": "none", "textMode": "value_and_name",
		},
	}
}

func float(v float64) *float64 { return &v }

// ratioUnit sets a 0–1 ratio's range.
func ratio(p Panel) Panel {
	p.FieldConfig.Defaults.Min, p.FieldConfig.Defaults.Max = float(0), float(1)
	return p
}

// thresholdLine draws v on a time series as a red dashed line.
func thresholdLine(p Panel, v float64) Panel {
	p.FieldConfig.Defaults.Thresholds = Thresholds{Mode: "absolute", Steps: []Step{{Color: "green"}, {Color: "red", Value: float(v)}}}
	p.FieldConfig.Defaults.Custom["thresholdsStyle"] = map[string]any{"mode": "dashed"}
	return p
}
