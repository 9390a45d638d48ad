package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/template"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
	"github.com/sluice-go/sluice/ratelimit"
)

// The dashboard and the alert rules over sluice's metrics, at the root of
// the repository.
const (
	dashboardFile = "../../dashboards/sluice.json"
	rulesFile     = "../../dashboards/sluice-rules.yaml"
)

// targetLabels are the labels Prometheus adds to every series it scrapes;
// the exporter does not produce them.
var targetLabels = map[string]bool{"job": true, "instance": true}

// TestDashboardQueries checks that every metric and label the dashboard
// and the alert rules query exists in what the demo's exporter produces
// over a real sluice server: it drives calls through the outcomes the
// queries name (admitted, rejected at the limit, after a wait in the
// queue, by a caller's quota, in a dry run), scrapes /metrics over HTTP
// while the server runs, and reads every expression with readPromQL.
func TestDashboardQueries(t *testing.T) {
	index := scrapeSluice(t)

	dash := readDashboard(t)
	rules := readRules(t)
	require.NotEmpty(t, dash, "no query in %s", dashboardFile)
	require.NotEmpty(t, rules, "no rule in %s", rulesFile)
	for _, q := range append(dash, rules...) {
		t.Run(q.Where, func(t *testing.T) {
			refs, err := readPromQL(q.Expr)
			require.NoError(t, err, q.Expr)
			for _, problem := range index.check(refs, q.Templates) {
				t.Errorf("%s\n  in %s", problem, q.Expr)
			}
		})
	}
}

// A query is one PromQL expression of the dashboard or the rules, with
// the templates (legend format, annotations) that name its labels.
type query struct {
	Where     string // e.g. panel "Limit vs in flight", target A
	Expr      string
	Templates []string
}

// seriesIndex is what the exporter produced: for each series name (with
// the _bucket, _sum and _count of histograms), each label's values.
type seriesIndex map[string]map[string]map[string]bool

// scrapeSluice starts the demo's exporter and a sluice server on
// loopback, makes calls that reach every decision the queries name, and
// returns what /metrics serves while the server is up.
func scrapeSluice(t *testing.T) seriesIndex {
	ms, err := startMetrics("127.0.0.1:0")
	require.NoError(t, err)
	defer func() { assert.NoError(t, ms.Close(context.Background())) }()

	const (
		unary  = "sluice.test.v1.TestService/Unary"
		stream = "sluice.test.v1.TestService/ServerStream"
		hold   = "hold" // a payload that blocks the handler until release
		caller = "caller"
	)
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	block := func(payload string) {
		if payload == hold {
			entered <- struct{}{}
			<-release
		}
	}
	svc := &testpb.Service{
		UnaryFunc: func(_ context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
			block(req.GetPayload())
			return &testpb.UnaryResponse{}, nil
		},
		ServerStreamFunc: func(req *testpb.ServerStreamRequest, _ grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
			block(req.GetPayload())
			return nil
		},
	}
	// Every call is its own caller but those that say otherwise in
	// metadata, so that only they meet the per-caller quota.
	var calls atomic.Int64
	key := func(ctx context.Context, _ string) string {
		if v := metadata.ValueFromIncomingContext(ctx, caller); len(v) > 0 {
			return v[0]
		}
		return strconv.FormatInt(calls.Add(1), 10)
	}
	quota, err := ratelimit.NewKeyed(0.001, 1)
	require.NoError(t, err)
	lim, err := interceptor.NewServer(
		interceptor.WithMeterProvider(ms.Provider()),
		interceptor.WithLogger(slog.New(slog.DiscardHandler)), // the dry run's lines
		interceptor.WithMethod("/"+unary, interceptor.Limit{Algorithm: limiter.FixedConfig{Limit: 1}, Queue: limiter.Queue{Size: 1}}),
		interceptor.WithMethod("/"+stream, interceptor.Limit{Algorithm: limiter.FixedConfig{Limit: 1}, DryRun: true}),
		interceptor.WithCallerLimiter(key, quota),
	)
	require.NoError(t, err)
	defer lim.Close()
	gs := grpc.NewServer(lim.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	defer func() {
		gs.Stop()
		assert.NoError(t, <-served)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	ctx := t.Context()

	queued := func(name string) int {
		for _, s := range lim.Limiters() {
			if s.Name == name {
				return s.Queued
			}
		}
		return 0
	}
	var wg sync.WaitGroup
	// Unary: one call holds the only permit, a second waits in the queue,
	// a third finds it full (rejected, reason "limit").
	wg.Go(func() {
		_, err := client.Unary(ctx, &testpb.UnaryRequest{Payload: hold})
		assert.NoError(t, err)
	})
	<-entered
	wg.Go(func() {
		_, err := client.Unary(ctx, &testpb.UnaryRequest{})
		assert.NoError(t, err) // admitted after its wait: sluice_queue_wait_seconds
	})
	for queued(unary) == 0 {
		// The queued call's arrival is observable only in the limiter's
		// state; yield to gRPC's goroutines until it is there.
		runtime.Gosched()
	}
	_, err = client.Unary(ctx, &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "the third unary call: %v", err)

	// ServerStream, in a dry run: the second stream would have been
	// rejected (sluice_dry_run="true") and goes through.
	wg.Go(func() {
		s, err := client.ServerStream(ctx, &testpb.ServerStreamRequest{Payload: hold})
		if assert.NoError(t, err) {
			_, err = s.Recv()
			assert.ErrorIs(t, err, io.EOF)
		}
	})
	<-entered
	s, err := client.ServerStream(ctx, &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.ErrorIs(t, err, io.EOF, "the dry run let the second stream through")

	close(release)
	wg.Wait()

	// One caller over its quota of one call: reason "caller_rate".
	greedy := metadata.AppendToOutgoingContext(ctx, caller, "greedy")
	_, err = client.Unary(greedy, &testpb.UnaryRequest{})
	require.NoError(t, err)
	_, err = client.Unary(greedy, &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "the greedy caller's second call: %v", err)

	// Scrape while the server is up: the gauges are observed only then.
	resp, err := http.Get("http://" + ms.Addr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return indexSeries(t, body)
}

// indexSeries parses the Prometheus text format into a seriesIndex.
func indexSeries(t *testing.T, body []byte) seriesIndex {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err, "%s", body)
	idx := seriesIndex{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		if idx[name] == nil {
			idx[name] = map[string]map[string]bool{}
		}
		set := func(l, v string) {
			if idx[name][l] == nil {
				idx[name][l] = map[string]bool{}
			}
			idx[name][l][v] = true
		}
		for _, lp := range labels {
			set(lp.GetName(), lp.GetValue())
		}
		for i := 0; i+1 < len(extra); i += 2 {
			set(extra[i], extra[i+1])
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
				for _, b := range m.GetHistogram().GetBucket() {
					add(name+"_bucket", m.GetLabel(), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", m.GetLabel(), "le", "+Inf")
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
				for _, q := range m.GetSummary().GetQuantile() {
					add(name, m.GetLabel(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return idx
}

// check returns what refs and templates name that the index lacks.
//
// A metric must exist; each matcher's label must be on that metric, but
// for the labels Prometheus adds (job, instance). A matcher's value must
// be among the label's values, for = and != alike (a typo in a negated
// matcher would otherwise silently match everything); a regular
// expression must match at least one of them. The labels of grouping
// clauses and templates must be on one of the expression's metrics.
func (idx seriesIndex) check(refs queryRefs, templates []string) []string {
	var problems []string
	anyHas := func(label string) bool {
		if targetLabels[label] {
			return true
		}
		for _, s := range refs.Selectors {
			if idx[s.Metric][label] != nil {
				return true
			}
		}
		return false
	}
	for _, s := range refs.Selectors {
		labels, ok := idx[s.Metric]
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %q is not in the exporter's output (it has %s)", s.Metric, idx.names()))
			continue
		}
		for _, m := range s.Matchers {
			if targetLabels[m.Label] {
				continue
			}
			values, ok := labels[m.Label]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s has no label %q (it has %s)", s.Metric, m.Label, keys(labels)))
				continue
			}
			if strings.Contains(m.Value, "$") {
				continue // a Grafana variable
			}
			switch m.Op {
			case "=", "!=":
				if !values[m.Value] {
					problems = append(problems, fmt.Sprintf("%s{%s} never has the value %q (it has %s)", s.Metric, m.Label, m.Value, keys(values)))
				}
			case "=~", "!~":
				re, err := regexp.Compile("^(?:" + m.Value + ")$")
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s{%s%s%q}: %v", s.Metric, m.Label, m.Op, m.Value, err))
					continue
				}
				if !slices.ContainsFunc(keys(values), re.MatchString) {
					problems = append(problems, fmt.Sprintf("%s{%s%s%q} matches none of %s", s.Metric, m.Label, m.Op, m.Value, keys(values)))
				}
			}
		}
	}
	for _, l := range refs.Labels {
		if !anyHas(l) {
			problems = append(problems, fmt.Sprintf("no metric of the expression has the label %q it groups by", l))
		}
	}
	for _, tmpl := range templates {
		for _, l := range templateLabels(tmpl) {
			if !anyHas(l) {
				problems = append(problems, fmt.Sprintf("no metric of the expression has the label %q that %q names", l, tmpl))
			}
		}
	}
	return problems
}

func (idx seriesIndex) names() []string { return keys(idx) }

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// grafanaPanel is the part of a Grafana panel the test reads.
type grafanaPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // of a collapsed row
}

// readDashboard returns the queries of the dashboard's panels and
// template variables.
func readDashboard(t *testing.T) []query {
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		Title      string         `json:"title"`
		UID        string         `json:"uid"`
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &d), dashboardFile)
	require.NotEmpty(t, d.Title, "the dashboard has no title")
	require.NotEmpty(t, d.UID, "the dashboard has no uid: each import would make a new copy")
	var qs []query
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type != "row" {
				assert.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
			}
			for _, tg := range p.Targets {
				qs = append(qs, query{
					Where:     fmt.Sprintf("panel %q target %s", p.Title, tg.RefID),
					Expr:      tg.Expr,
					Templates: []string{tg.LegendFormat},
				})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// Grafana stores a variable's query as a string or, in newer
		// versions, as {"query": "..."}.
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q.Query); err != nil {
			require.NoError(t, json.Unmarshal(v.Query, &q), "variable %q", v.Name)
		}
		qs = append(qs, query{Where: fmt.Sprintf("variable %q", v.Name), Expr: q.Query})
	}
	return qs
}

// ruleGroups is the format of a Prometheus rule file; unknown fields are
// an error.
type ruleGroups struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// readRules validates the structure of the rule file, as far as promtool
// check rules would without evaluating PromQL, and returns its queries.
func readRules(t *testing.T) []query {
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var rg ruleGroups
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rg), rulesFile)
	require.NotEmpty(t, rg.Groups, "%s has no groups", rulesFile)

	// Annotations and labels are Go templates with Prometheus's data and
	// functions; parsing them catches syntax errors and unknown functions.
	funcs := template.FuncMap{}
	for _, f := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp",
		"toTime", "toDuration", "title", "toUpper", "toLower", "match", "reReplaceAll", "label", "value", "first",
		"query", "sortByLabel", "strvalue", "args", "tmpl", "safeHtml", "pathPrefix", "externalURL", "parseDuration",
		"stripPort", "stripDomain", "graphLink", "tableLink", "now"} {
		funcs[f] = func(...any) any { return nil }
	}
	const tmplHeader = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"

	var qs []query
	groups := map[string]bool{}
	for _, g := range rg.Groups {
		require.NotEmpty(t, g.Name, "a group has no name")
		require.False(t, groups[g.Name], "two groups are named %q", g.Name)
		groups[g.Name] = true
		if g.Interval != "" {
			_, err := model.ParseDuration(g.Interval)
			assert.NoError(t, err, "group %q interval", g.Name)
		}
		require.NotEmpty(t, g.Rules, "group %q has no rules", g.Name)
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %q rule %d", g.Name, i)
			switch {
			case r.Alert != "" && r.Record == "":
				where = fmt.Sprintf("alert %q", r.Alert)
			case r.Record != "" && r.Alert == "":
				where = fmt.Sprintf("record %q", r.Record)
				assert.Regexp(t, `^[a-zA-Z_:][a-zA-Z0-9_:]*$`, r.Record, "%s: not a metric name", where)
				assert.Empty(t, r.For+r.KeepFiringFor, "%s: for and keep_firing_for are for alerts", where)
				assert.Empty(t, r.Annotations, "%s: annotations are for alerts", where)
			default:
				t.Errorf("%s: needs exactly one of alert and record", where)
			}
			require.NotEmpty(t, strings.TrimSpace(r.Expr), "%s has no expr", where)
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if d != "" {
					_, err := model.ParseDuration(d)
					assert.NoError(t, err, "%s: duration %q", where, d)
				}
			}
			var templates []string
			for _, m := range []map[string]string{r.Labels, r.Annotations} {
				for k, v := range m {
					assert.Regexp(t, labelNameRE, k, "%s: %q is not a label name", where, k)
					_, err := template.New(k).Funcs(funcs).Parse(tmplHeader + v)
					assert.NoError(t, err, "%s: template %s", where, k)
					templates = append(templates, v)
				}
			}
			qs = append(qs, query{Where: where, Expr: r.Expr, Templates: templates})
		}
	}
	return qs
}

// TestSeriesIndexCheck shows that check catches what it is there to
// catch, on a made-up index.
func TestSeriesIndexCheck(t *testing.T) {
	idx := seriesIndex{
		"sluice_limit":              {"sluice_limiter": {"a/B": true}, "sluice_side": {"server": true}},
		"sluice_rtt_seconds_bucket": {"sluice_limiter": {"a/B": true}, "le": {"0.1": true, "+Inf": true}},
	}
	tests := []struct {
		expr      string
		templates []string
		problems  int
	}{
		{`sluice_limit{sluice_side="server", job=~"$job", sluice_limiter=~"$limiter"}`, []string{"{{sluice_limiter}} {{instance}}"}, 0},
		{`histogram_quantile(0.9, sum by (le, sluice_limiter) (rate(sluice_rtt_seconds_bucket[5m])))`, nil, 0},
		{`sluice_limits`, nil, 1},                                    // no such metric
		{`sluice_limit{sluice_sid="server"}`, nil, 1},                // no such label
		{`sluice_limit{sluice_side!="sever"}`, nil, 1},               // no such value, negated
		{`sluice_limit{sluice_side=~"cli.*"}`, nil, 1},               // matches nothing
		{`sum by (sluice_reason) (sluice_limit)`, nil, 1},            // grouping by a label it lacks
		{`sluice_limit`, []string{"{{ $labels.sluice_method }}"}, 1}, // template names a label it lacks
	}
	for _, tt := range tests {
		refs, err := readPromQL(tt.expr)
		require.NoError(t, err, tt.expr)
		assert.Len(t, idx.check(refs, tt.templates), tt.problems, tt.expr)
	}
}
