package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/boualleiguie/macrack-operator/test/envtest/harness"
)

// dashboardFile is the Grafana dashboard the operator ships.
var dashboardFile = filepath.Join("config", "grafana", "macrack.json")

// dashboard is what the checks read of a Grafana dashboard.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		RefID      string      `json:"refId"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	// Panels are a collapsed row's.
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(path string) (*dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d := &dashboard{}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// queryPanels are the dashboard's panels that query, a collapsed row's
// included.
func (d *dashboard) queryPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// metricsByPanel maps each panel's title to the macrack_ metrics its
// targets query.
func (d *dashboard) metricsByPanel() map[string][]string {
	out := map[string][]string{}
	for _, p := range d.queryPanels() {
		for _, t := range p.Targets {
			out[p.Title] = append(out[p.Title], metricNames(t.Expr)...)
		}
	}
	return out
}

// metricNames lists the macrack_ metric names a PromQL expression selects,
// without repeats, in order. It tokenizes, not parses: string literals
// and comments are skipped, and so are label names, inside a selector's
// braces and in the label lists of by, without, on, ignoring, group_left
// and group_right; so are Grafana's $variables.
func metricNames(expr string) []string {
	var out []string
	braces := 0
	labelList := false // inside the parentheses of a label list
	expectList := false
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '$':
			// $var, ${var}, ${var:fmt}, $__interval.
			i++
			if i < len(expr) && expr[i] == '{' {
				for i < len(expr) && expr[i] != '}' {
					i++
				}
				i++
				continue
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c == '{':
			braces++
			i++
		case c == '}':
			braces = max(braces-1, 0)
			i++
		case c == '(':
			if expectList {
				labelList, expectList = true, false
			}
			i++
		case c == ')':
			labelList = false
			i++
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			switch {
			case braces > 0 || labelList:
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, word):
				expectList = true
				continue
			case strings.HasPrefix(word, "macrack_") && !slices.Contains(out, word):
				out = append(out, word)
			}
			expectList = false
		case c >= '0' && c <= '9':
			// A number or a duration (5m, 1e3, 0x1f): never a name.
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		default:
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				expectList = false
			}
			i++
		}
	}
	return out
}

// skipString returns the index past the string literal that starts at i;
// backquoted strings have no escapes.
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`':
			i++
		case s[i] == q:
			return i + 1
		}
	}
	return i
}

func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isIdent(c byte) bool      { return isIdentStart(c) || c >= '0' && c <= '9' }

// histogramSuffixes are the series names a histogram (or, _sum and
// _count, a summary) exposes beside its family's.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// missingMetrics lists the names the scrape lacks, sorted: a name is
// there when its family is, or when it is a histogram's _bucket, _sum or
// _count and that histogram is (a summary's _sum and _count too).
func missingMetrics(names []string, scrape map[string]*dto.MetricFamily) []string {
	var out []string
	for _, n := range names {
		if f := scrape[n]; f != nil && len(f.GetMetric()) > 0 {
			continue
		}
		found := false
		for _, suffix := range histogramSuffixes {
			base, ok := strings.CutSuffix(n, suffix)
			f := scrape[base]
			if !ok || f == nil || len(f.GetMetric()) == 0 {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				found = true
			case dto.MetricType_SUMMARY:
				found = suffix != "_bucket"
			}
		}
		if !found && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// families indexes a gather by name.
func families(gathered []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := make(map[string]*dto.MetricFamily, len(gathered))
	for _, f := range gathered {
		out[f.GetName()] = f
	}
	return out
}

func TestMetricNamesTokenizesPromQL(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"a bare selector", `macrack_leases`, []string{"macrack_leases"}},
		{"a selector's label names and values are not metrics",
			`macrack_chassis{phase="Leased", macrack_label=~"macrack_in_a_string|x", class=~"$class"}`, []string{"macrack_chassis"}},
		{"a histogram's bucket series, by its own name, and the label list of by",
			`histogram_quantile(0.99, sum by (le, macrack_not_a_metric) (rate(macrack_x_seconds_bucket[$__rate_interval])))`,
			[]string{"macrack_x_seconds_bucket"}},
		{"by after the aggregation, and without, on, group_left",
			`sum(rate(macrack_a_total[5m])) by (macrack_l) / on (macrack_m) group_left (macrack_n) macrack_b without (macrack_o)`,
			[]string{"macrack_a_total", "macrack_b"}},
		{"both sides of a binary operator, once each",
			`max by (image) (increase(macrack_p_sum[$__range])) / max by (image) (increase(macrack_p_count[$__range])) + macrack_p_sum`,
			[]string{"macrack_p_sum", "macrack_p_count"}},
		{"comments, escaped quotes, backquotes and Grafana variables",
			"macrack_a # macrack_in_a_comment\n + on() macrack_b{x=\"a\\\"macrack_c\"} + macrack_d{y=`macrack_e`} * ${macrack_var} * $macrack_var2",
			[]string{"macrack_a", "macrack_b", "macrack_d"}},
		{"a name inside another is not a name, nor a duration",
			`not_macrack_x + macrack_y offset 5m + 1e3`, []string{"macrack_y"}},
		{"no macrack metric", `up{job="macrack_operator"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
				t.Fatalf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

func TestMissingMetricsStripsOnlyAHistogramsSuffixes(t *testing.T) {
	hist, counter, summary := dto.MetricType_HISTOGRAM, dto.MetricType_COUNTER, dto.MetricType_SUMMARY
	family := func(name string, typ dto.MetricType) *dto.MetricFamily {
		return &dto.MetricFamily{Name: &name, Type: &typ, Metric: []*dto.Metric{{}}}
	}
	empty := "macrack_empty_total"
	scrape := map[string]*dto.MetricFamily{
		"macrack_h_seconds": family("macrack_h_seconds", hist),
		"macrack_c":         family("macrack_c", counter),
		"macrack_s":         family("macrack_s", summary),
		empty:               {Name: &empty, Type: &counter},
	}
	got := missingMetrics([]string{
		"macrack_h_seconds_bucket", "macrack_h_seconds_sum", "macrack_h_seconds_count", "macrack_h_seconds",
		"macrack_c", "macrack_c_count", "macrack_s_sum", "macrack_s_bucket", empty, "macrack_not_a_metric", "macrack_not_a_metric",
	}, scrape)
	want := []string{"macrack_c_count", empty, "macrack_not_a_metric", "macrack_s_bucket"}
	if !slices.Equal(got, want) {
		t.Fatalf("missing %q, want %q", got, want)
	}
}

// The dashboard is one Grafana can import: its schema, its datasource
// variable, and panels that each query macrack metrics through it.
func TestTheDashboardIsAGrafanaDashboardOnTheDatasourceVariable(t *testing.T) {
	d, err := loadDashboard(filepath.Join(harness.RepoRoot(), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 || d.Title == "" || d.UID == "" {
		t.Errorf("schemaVersion %d, title %q, uid %q: want a schema of Grafana 10 or 11, a title and a uid", d.SchemaVersion, d.Title, d.UID)
	}
	var ds bool
	for _, v := range d.Templating.List {
		ds = ds || v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}
	if !ds {
		t.Error("no datasource variable of type prometheus named datasource")
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q has id %d, taken by %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q has no valid gridPos: %+v", p.Title, p.GridPos)
		}
	}
	uses := func(ds *datasource) bool { return ds != nil && ds.Type == "prometheus" && ds.UID == "${datasource}" }
	panels := d.queryPanels()
	if len(panels) < 20 {
		t.Errorf("%d panels that query, want the 20 and more the dashboard has", len(panels))
	}
	for _, p := range panels {
		if !uses(p.Datasource) || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d targets; want ${datasource} and a target", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if !uses(tg.Datasource) || tg.RefID == "" || len(metricNames(tg.Expr)) == 0 {
				t.Errorf("panel %q target %q: datasource %+v, expr %q; want ${datasource} and a macrack metric", p.Title, tg.RefID, tg.Datasource, tg.Expr)
			}
		}
	}
}
