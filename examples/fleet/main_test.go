package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/testbed/fleet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-s", "25ms", "-load", "1.5", "-warmup", "5s", "-phase", "20s", "-degrade", "3", "-out", "x"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 25*time.Millisecond, o.S)
	assert.Equal(t, 1.5, o.Load)
	assert.Equal(t, 5*time.Second, o.Warmup)
	assert.Equal(t, 20*time.Second, o.Phase)
	assert.Equal(t, 3, o.Degrade)
	assert.Equal(t, "go run ./fleet -s 25ms -load 1.5 -warmup 5s -phase 20s -degrade 3 -out x", o.Command)
	for _, bad := range [][]string{{"-s", "0"}, {"-load", "0"}, {"-phase", "0s"}, {"-phase", "1500ms"}, {"-warmup", "-1s"},
		{"-warmup", "500ms"}, {"-degrade", "4"}, {"-degrade", "-1"}, {"-out", ""}, {"extra"}} {
		_, err := parseFlags(bad, io.Discard)
		assert.Error(t, err, "parseFlags(%q)", bad)
	}
}

func TestPhases(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	ps := o.phases()
	require.Len(t, ps, 3)
	assert.Equal(t, fleet.Phase{Name: "0.9x", Duration: 25 * time.Second}, ps[0], "warm-up and the first measured phase")
	assert.Equal(t, fleet.Phase{Name: "server 2 at half", Duration: 15 * time.Second, Capacities: []int{16, 4, 4}}, ps[1])
	assert.Equal(t, fleet.Phase{Name: "server 2 back", Duration: 15 * time.Second}, ps[2], "nil capacities: the fleet's own")
	assert.Equal(t, []int{16, 8, 4}, o.Capacities, "halving a phase's capacities left the fleet's alone")
	assert.Equal(t, []int{10, 0, 0}, []int{o.skip(0), o.skip(1), o.skip(2)})

	o.Degrade = 0
	assert.Len(t, o.phases(), 1)
}

// fakePass builds a pass by hand: per phase, seconds of sent, good and
// rejected calls per server and the latency of every good call, so that
// the report's figures can be checked without a run.
func fakePass(t *testing.T, name string, cfg fleet.Config, o options, perPhase [][3][]int, lat time.Duration) pass {
	t.Helper()
	res := &fleet.Result{Config: cfg}
	sec := 0
	for i, ph := range cfg.Plan() {
		for range int(ph.Duration / time.Second) {
			s := fleet.Second{T: sec, Sent: perPhase[i][0], Good: perPhase[i][1], Rejected: perPhase[i][2], Reports: make([]int, 3)}
			for range total(s.Good) {
				s.Latencies = append(s.Latencies, lat)
			}
			res.Seconds = append(res.Seconds, s)
			sec++
		}
	}
	p := pass{balancer: balancer{Name: name}, Result: res}
	for i := range cfg.Plan() {
		p.Clean = append(p.Clean, res.Phase(i, o.skip(i), o.S/2))
		p.All = append(p.All, res.Phase(i, o.skip(i), 0))
	}
	return p
}

// TestReport checks the report's per-phase ideal, the sentence saying
// what the load reports bought and the target's verdict on made-up
// seconds: round_robin overloading the small server, weighted_round_robin
// serving all it is offered, in the demo's phases at 0.9x of 16, 8 and 4
// workers (1400 calls/s; 1260 offered; 1200 with server 2 at half).
func TestReport(t *testing.T) {
	o, err := parseFlags([]string{"-warmup", "1s", "-phase", "2s"}, io.Discard)
	require.NoError(t, err)
	cfg := fleet.Config{Capacities: o.Capacities, Service: o.S, Load: o.Load, Phases: o.phases(), Seed: 1}
	rr := fakePass(t, "round_robin", cfg, o, [][3][]int{
		{{420, 420, 420}, {420, 400, 200}, {0, 20, 220}},
		{{420, 420, 420}, {420, 200, 200}, {0, 220, 220}},
		{{420, 420, 420}, {420, 400, 200}, {0, 20, 220}},
	}, 150*time.Millisecond)
	wrr := fakePass(t, "weighted_round_robin", cfg, o, [][3][]int{
		{{720, 360, 180}, {720, 360, 180}, {0, 0, 0}},
		{{800, 230, 230}, {800, 200, 200}, {0, 30, 30}},
		{{720, 360, 180}, {710, 360, 180}, {0, 0, 0}},
	}, 30*time.Millisecond)
	rep := report{o: o, passes: []pass{rr, wrr}, date: time.Unix(0, 0), load: [2]string{"1", "2"}}

	for i, want := range []float64{1260, 1200, 1260} {
		assert.InDelta(t, want, wrr.All[i].Ideal, 1e-9, "phase %d: ideal = min(offered 1260, capacity)", i)
		assert.InDelta(t, want, rr.All[i].Ideal, 1e-9, "phase %d", i)
	}
	assert.InDelta(t, 1020.0/1260, rr.All[0].GoodputRatio(), 1e-9)
	assert.InDelta(t, 1.0, wrr.All[0].GoodputRatio(), 1e-9, "a perfect run at 0.9x reads 100 %, not 90 %")

	sentence := comparison(cfg.Plan(), rr.All, wrr.All)
	assert.Equal(t, "What the load reports bought, weighted_round_robin against round_robin: "+
		"+240 calls/s of goodput in “0.9x” (100.0 % of ideal against 81.0 %, 0.0 % of calls rejected against 19.0 %, p99 30ms against 150ms), "+
		"+380 calls/s of goodput in “server 2 at half” (100.0 % of ideal against 68.3 %, 4.8 % of calls rejected against 34.9 %, p99 30ms against 150ms), "+
		"and +230 calls/s of goodput in “server 2 back” (99.2 % of ideal against 81.0 %, 0.0 % of calls rejected against 19.0 %, p99 30ms against 150ms).",
		sentence)
	assert.Contains(t, comparison(cfg.Plan(), wrr.All, rr.All), "-240 calls/s of goodput in “0.9x”", "a loss reads as one")

	v := verdict("0.9x", rr.All[0], wrr.All[0], wrr.Clean[0])
	assert.Contains(t, v, "**met**, 100.0 % of ideal and 0.0 % rejected over all 2 seconds")
	assert.Contains(t, v, "round_robin beside it: 81.0 % of ideal, 19.0 % rejected")
	assert.Contains(t, verdict("0.9x", wrr.All[0], rr.All[0], rr.Clean[0]), "**not met**")

	var md bytes.Buffer
	require.NoError(t, rep.writeMarkdown(&md))
	for _, want := range []string{
		sentence,
		"| 0.9x | 1400 (16+8+4 workers) | round_robin | 2 | 1260 | 1260 | 1020 | 81.0 % | 19.0 % | 150ms | 33 % / 33 % / 33 % |",
		"|  |  | weighted_round_robin | 2 | 1260 | 1260 | 1260 | 100.0 % | 0.0 % | 30ms | 57 % / 29 % / 14 % |",
		"| server 2 at half | 1200 (16+4+4 workers) | round_robin | 2 | 1260 | 1200 | 820 | 68.3 % |",
	} {
		assert.Contains(t, md.String(), want)
	}
	var png bytes.Buffer
	require.NoError(t, rep.writeChart(&png))
	assert.True(t, bytes.HasPrefix(png.Bytes(), []byte("\x89PNG\r\n\x1a\n")), "fleet.png is not a PNG")
}

// TestRun runs both balancers for a few seconds each at a low rate and
// checks the files the example writes, not the numbers it measures.
func TestRun(t *testing.T) {
	o, err := parseFlags([]string{"-warmup", "1s", "-phase", "1s", "-load", "0.2", "-out", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), o, &out), out.String())
	for _, want := range []string{"== round_robin", "== weighted_round_robin", "goodput", "What the load reports bought", "Target (issue 32)", "wrote "} {
		assert.Contains(t, out.String(), want)
	}
	md, err := os.ReadFile(filepath.Join(o.Out, "fleet.md"))
	require.NoError(t, err)
	for _, want := range []string{"| round_robin |", "| weighted_round_robin |", "| server 2 at half |", "blackoutPeriod", "fleet.png"} {
		assert.True(t, strings.Contains(string(md), want), "fleet.md lacks %q", want)
	}
	png, err := os.ReadFile(filepath.Join(o.Out, "fleet.png"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "fleet.png is not a PNG")
}
