package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file holds a small reader of PromQL, just enough to list what an
// expression of the dashboard or the alert rules refers to: the metric
// selectors with their label matchers, and the label names of by,
// without, on, ignoring, group_left and group_right clauses and of
// Grafana's label_values(metric, label).
//
// It is a tokenizer, not a parser, and its limits are these:
//   - An identifier followed by "(", "by" or "without" is a function or
//     an aggregation;
//     any other identifier that is not a keyword is a metric name. It does
//     not know PromQL's grammar, so it accepts expressions Prometheus
//     would refuse (promtool check rules catches those; see the Makefile's
//     check-rules).
//   - Ranges and subqueries ("[5m]", "[$__rate_interval]", "[1h:5m]") and
//     the duration after offset are skipped whole.
//   - String arguments of functions are skipped: the labels named by
//     label_replace or label_join, for instance, are not checked.
//   - A matcher's value holding a Grafana variable ("$side") is not
//     checked, only its label name.
//   - It reads double-quoted, single-quoted and backquoted strings;
//     "{__name__=...}" selectors are read as the metric they name when the
//     matcher is an equality.

// A selector is a metric selector of an expression: the metric's name
// and its label matchers.
type selector struct {
	Metric   string
	Matchers []matcher
}

// A matcher is one label matcher of a selector.
type matcher struct {
	Label, Op, Value string
}

// queryRefs is what one expression refers to.
type queryRefs struct {
	Selectors []selector
	// Labels are named by grouping clauses or label_values; any metric of
	// the expression may carry them.
	Labels []string
}

type tokenKind int

const (
	tIdent  tokenKind = iota // metric, label, function or keyword
	tString                  // a string's value, unquoted
	tNumber                  // a number or a duration
	tVar                     // a Grafana variable: $x, ${x}, $__rate_interval
	tRange                   // a whole "[...]"
	tPunct                   // an operator or a bracket
)

type token struct {
	kind tokenKind
	text string
}

// operators are PromQL's punctuation, longest first.
var operators = []string{"=~", "!~", "!=", "==", ">=", "<=", "=", "<", ">", "+", "-", "*", "/", "%", "^", "(", ")", "{", "}", ",", "@"}

// lexPromQL splits expr into tokens.
func lexPromQL(expr string) ([]token, error) {
	var toks []token
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment, to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			raw := expr[i : j+1]
			var s string
			switch c {
			case '"', '`':
				var err error
				if s, err = strconv.Unquote(raw); err != nil {
					return nil, fmt.Errorf("bad string %s: %v", raw, err)
				}
			default: // single quotes: swap them for double ones
				var err error
				inner := strings.ReplaceAll(strings.ReplaceAll(raw[1:len(raw)-1], `\'`, `'`), `"`, `\"`)
				if s, err = strconv.Unquote(`"` + inner + `"`); err != nil {
					return nil, fmt.Errorf("bad string %s: %v", raw, err)
				}
			}
			toks = append(toks, token{tString, s})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated [ at offset %d", i)
			}
			toks = append(toks, token{tRange, expr[i : i+j+1]})
			i += j + 1
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				k := strings.IndexByte(expr[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated ${ at offset %d", i)
				}
				j += k + 1
			} else {
				for j < len(expr) && isIdent(expr[j]) {
					j++
				}
			}
			toks = append(toks, token{tVar, expr[i:j]})
			i = j
		case '0' <= c && c <= '9' || c == '.' && i+1 < len(expr) && '0' <= expr[i+1] && expr[i+1] <= '9':
			j := i
			for j < len(expr) && (isIdent(expr[j]) || expr[j] == '.') {
				j++
			}
			toks = append(toks, token{tNumber, expr[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			toks = append(toks, token{tIdent, expr[i:j]})
			i = j
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(expr[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			toks = append(toks, token{tPunct, op})
			i += len(op)
		}
	}
	return toks, nil
}

// grouping are the keywords followed by a list of label names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are the other identifiers that are not metric names. PromQL's
// keywords are case-insensitive.
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}

// readPromQL lists what expr refers to.
func readPromQL(expr string) (queryRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return queryRefs{}, err
	}
	var q queryRefs
	at := func(i int, kind tokenKind, text string) bool {
		return i < len(toks) && toks[i].kind == kind && toks[i].text == text
	}
	// labelList reads "(a, b, ...)" from toks[i] and returns the index
	// after it.
	labelList := func(i int) (int, error) {
		i++ // the "("
		for ; i < len(toks) && !at(i, tPunct, ")"); i++ {
			switch {
			case toks[i].kind == tIdent:
				q.Labels = append(q.Labels, toks[i].text)
			case at(i, tPunct, ","):
			default:
				return i, fmt.Errorf("unexpected %q in a label list", toks[i].text)
			}
		}
		if i == len(toks) {
			return i, fmt.Errorf("unterminated label list")
		}
		return i + 1, nil
	}
	// matchers reads "{l op "v", ...}" from toks[i] into s and returns the
	// index after it.
	matchers := func(i int, s *selector) (int, error) {
		i++ // the "{"
		for !at(i, tPunct, "}") {
			if i+2 >= len(toks) || toks[i].kind != tIdent || toks[i+1].kind != tPunct || toks[i+2].kind != tString {
				return i, fmt.Errorf("a matcher must be label op \"value\", near token %d of %q", i, expr)
			}
			op := toks[i+1].text
			if op != "=" && op != "!=" && op != "=~" && op != "!~" {
				return i, fmt.Errorf("unknown matcher operator %q", op)
			}
			m := matcher{toks[i].text, op, toks[i+2].text}
			if m.Label == "__name__" && m.Op == "=" {
				s.Metric = m.Value
			} else {
				s.Matchers = append(s.Matchers, m)
			}
			i += 3
			if at(i, tPunct, ",") {
				i++
			} else if !at(i, tPunct, "}") {
				return i, fmt.Errorf("expected , or } after a matcher in %q", expr)
			}
		}
		return i + 1, nil
	}
	for i := 0; i < len(toks); {
		t := toks[i]
		switch {
		case t.kind == tIdent && grouping[t.text]:
			i++
			if at(i, tPunct, "(") {
				if i, err = labelList(i); err != nil {
					return q, err
				}
			}
		case t.kind == tIdent && keywords[strings.ToLower(t.text)]:
			i++
			if t.text == "offset" && i < len(toks) && toks[i].kind == tNumber {
				i++
			}
		case t.kind == tIdent && t.text == "label_values" && at(i+1, tPunct, "("):
			// Grafana's label_values(label) or label_values(selector, label):
			// the label is the last argument.
			j := i + 2
			for j < len(toks) && !at(j, tPunct, ")") {
				j++
			}
			if j == len(toks) || toks[j-1].kind != tIdent {
				return q, fmt.Errorf("label_values must end with a label name: %q", expr)
			}
			q.Labels = append(q.Labels, toks[j-1].text)
			if at(j-2, tPunct, ",") { // read the selector before it
				sub, err := readPromQL(tokensText(toks[i+2 : j-2]))
				if err != nil {
					return q, err
				}
				q.Selectors = append(q.Selectors, sub.Selectors...)
				q.Labels = append(q.Labels, sub.Labels...)
			}
			i = j + 1
		case t.kind == tIdent && (at(i+1, tPunct, "(") || at(i+1, tIdent, "by") || at(i+1, tIdent, "without")):
			i++ // a function or an aggregation
		case t.kind == tIdent: // a metric
			s := selector{Metric: t.text}
			i++
			if at(i, tPunct, "{") {
				if i, err = matchers(i, &s); err != nil {
					return q, err
				}
			}
			q.Selectors = append(q.Selectors, s)
		case t.kind == tPunct && t.text == "{": // {__name__="..."} or a nameless selector
			var s selector
			if i, err = matchers(i, &s); err != nil {
				return q, err
			}
			q.Selectors = append(q.Selectors, s)
		default:
			i++
		}
	}
	return q, nil
}

// tokensText puts tokens back into PromQL text.
func tokensText(toks []token) string {
	var b strings.Builder
	for _, t := range toks {
		switch t.kind {
		case tString:
			b.WriteString(strconv.Quote(t.text))
		default:
			b.WriteString(t.text)
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// templateLabels returns the labels a Grafana legend format ("{{sluice_limiter}}
// limit") or a Prometheus template ("{{ $labels.instance }}") names.
func templateLabels(s string) []string {
	var out []string
	for _, m := range templateLabelRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

var templateLabelRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}|\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

func TestReadPromQL(t *testing.T) {
	tests := []struct {
		expr string
		want queryRefs
	}{
		{`sluice_limit`, queryRefs{Selectors: []selector{{Metric: "sluice_limit"}}}},
		{
			`sum by (le, sluice_side) (rate(sluice_rtt_seconds_bucket{job=~"$job", sluice_side="server"}[$__rate_interval]))`,
			queryRefs{
				Selectors: []selector{{Metric: "sluice_rtt_seconds_bucket", Matchers: []matcher{{"job", "=~", "$job"}, {"sluice_side", "=", "server"}}}},
				Labels:    []string{"le", "sluice_side"},
			},
		},
		{
			// Aggregation clause after the parentheses, a number, a
			// comparison, and / on ... group_left.
			"histogram_quantile(0.99, sum(rate(a_bucket[5m:1m] offset 1h)) by (le)) > 0.5 and on (x) group_left (y) b{c!~'d.*'} # c",
			queryRefs{
				Selectors: []selector{{Metric: "a_bucket"}, {Metric: "b", Matchers: []matcher{{"c", "!~", "d.*"}}}},
				Labels:    []string{"le", "x", "y"},
			},
		},
		{
			`{__name__="sluice_limit", sluice_side!="client"} / ignoring(a) sluice_inflight`,
			queryRefs{
				Selectors: []selector{{Metric: "sluice_limit", Matchers: []matcher{{"sluice_side", "!=", "client"}}}, {Metric: "sluice_inflight"}},
				Labels:    []string{"a"},
			},
		},
		{
			`label_values(sluice_limit{job=~"$job"}, sluice_limiter)`,
			queryRefs{
				Selectors: []selector{{Metric: "sluice_limit", Matchers: []matcher{{"job", "=~", "$job"}}}},
				Labels:    []string{"sluice_limiter"},
			},
		},
		{`label_values(job)`, queryRefs{Labels: []string{"job"}}},
		{`vector(1) == bool Inf`, queryRefs{}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := readPromQL(tt.expr)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestReadPromQLErrors(t *testing.T) {
	for _, expr := range []string{
		`sluice_limit{job="x"`,
		`sluice_limit{job}`,
		`sluice_limit{job=="x"}`,
		`rate(x[5m)`,
		`x{a="unterminated}`,
		`sum by (le, "a") (x)`,
		`a ; b`,
	} {
		_, err := readPromQL(expr)
		assert.Error(t, err, expr)
	}
}

func TestTemplateLabels(t *testing.T) {
	assert.Equal(t, []string{"sluice_limiter", "instance"}, templateLabels("{{sluice_limiter}} ({{ instance }}) limit"))
	assert.Equal(t, []string{"job", "sluice_side"}, templateLabels(`{{ $labels.job }}'s {{ $labels.sluice_side }} at {{ $value | humanize }}`))
}
