package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-go/sluice/internal/testbed/loadgen"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testOptions are small settings: capacity 2/20ms = 100 calls/s.
func testOptions(t *testing.T) options {
	o := defaultOptions()
	o.C, o.S = 2, 20*time.Millisecond
	o.Out = t.TempDir()
	o.Command = "go test"
	return o
}

// steady returns n calls arriving evenly over [from, from+d), all ending
// with result r after latency lat.
func steady(from, d time.Duration, n int, r loadgen.Result, lat time.Duration) []loadgen.Call {
	calls := make([]loadgen.Call, n)
	for i := range calls {
		calls[i] = loadgen.Call{Arrival: from + d*time.Duration(i)/time.Duration(n), Latency: lat, Result: r}
	}
	return calls
}

func TestSettleTime(t *testing.T) {
	o := testOptions(t) // capacity 100/s: 25 calls per 250ms window
	phase := phaseSpec{Name: "p", Load: 2, Capacity: 2, Duration: 2 * time.Second}
	start := 3 * time.Second
	good := func(from, d time.Duration) []loadgen.Call {
		return steady(start+from, d, int(d/(10*time.Millisecond)), loadgen.OK, o.S)
	}
	bad := func(from, d time.Duration, r loadgen.Result, lat time.Duration) []loadgen.Call {
		return steady(start+from, d, int(d/(10*time.Millisecond)), r, lat)
	}
	ms := time.Millisecond
	tests := []struct {
		name  string
		calls []loadgen.Call
		want  time.Duration
	}{
		{"good from the start", good(0, 2*time.Second), 0},
		{"late for 500ms", append(bad(0, 500*ms, loadgen.DeadlineExceeded, o.deadline()), good(500*ms, 1500*ms)...), 500 * ms},
		// Successes slower than 3×S do not count as settled.
		{"slow for 750ms", append(bad(0, 750*ms, loadgen.OK, 4*o.S), good(750*ms, 1250*ms)...), 750 * ms},
		// Half of the ideal is shed: not settled, however fast.
		{"half rejected", append(steady(start, 2*time.Second, 100, loadgen.OK, o.S), steady(start, 2*time.Second, 100, loadgen.Rejected, 0)...), notSettled},
		// Good only for the last 750ms: less than a second of good windows.
		{"good too briefly", append(bad(0, 1250*ms, loadgen.DeadlineExceeded, o.deadline()), good(1250*ms, 750*ms)...), notSettled},
		{"nothing arrives", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settleTime(tt.calls, o, phase, start).After; got != tt.want {
				t.Errorf("settleTime = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSettleHeld(t *testing.T) {
	o := testOptions(t)
	phase := phaseSpec{Name: "p", Load: 1, Capacity: 2, Duration: 2 * time.Second}
	// Good for the first second, late for the second one.
	calls := steady(0, time.Second, 100, loadgen.OK, o.S)
	calls = append(calls, steady(time.Second, time.Second, 100, loadgen.DeadlineExceeded, o.deadline())...)
	if got, want := settleTime(calls, o, phase, 0), (settling{After: 0, Held: 0.5}); got != want {
		t.Errorf("settleTime = %+v, want %+v", got, want)
	}
}

func TestSettleTimesPerPhase(t *testing.T) {
	o := testOptions(t)
	phases := []phaseSpec{
		{Name: "a", Load: 1, Capacity: 2, Duration: time.Second},
		{Name: "b", Load: 1, Capacity: 1, Duration: 2 * time.Second},
	}
	// Phase a is good throughout; phase b has late calls for its first
	// 250ms, then 50 good calls a second, the halved capacity.
	calls := steady(0, time.Second, 100, loadgen.OK, o.S)
	calls = append(calls, steady(time.Second, 250*time.Millisecond, 25, loadgen.DeadlineExceeded, o.deadline())...)
	calls = append(calls, steady(1250*time.Millisecond, 1750*time.Millisecond, 88, loadgen.OK, o.S)...)
	got := settleTimes(calls, o, phases)
	want := []settling{{After: 0, Held: 1}, {After: 250 * time.Millisecond, Held: 1}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("settleTimes = %+v, want %+v", got, want)
	}
}

func TestSummarize(t *testing.T) {
	o := testOptions(t)
	o.Skip = 500 * time.Millisecond
	phases := []phaseSpec{
		{Name: "full", Load: 2, Capacity: 2, Duration: 2 * time.Second},
		{Name: "half", Load: 2, Capacity: 1, Duration: 2 * time.Second},
	}
	var calls []loadgen.Call
	// Left out: the first 500ms of each phase.
	calls = append(calls, steady(0, 500*time.Millisecond, 50, loadgen.DeadlineExceeded, o.deadline())...)
	// 300 calls in 1.5s (200/s, twice the capacity of 100/s): 150 good,
	// 120 rejected, 30 late.
	calls = append(calls, steady(500*time.Millisecond, 1500*time.Millisecond, 150, loadgen.OK, o.S)...)
	calls = append(calls, steady(500*time.Millisecond, 1500*time.Millisecond, 120, loadgen.Rejected, 0)...)
	calls = append(calls, steady(500*time.Millisecond, 1500*time.Millisecond, 30, loadgen.DeadlineExceeded, o.deadline())...)
	// Phase "half": capacity 50/s, 75 good calls in 1.5s, one of them late
	// although it succeeded.
	calls = append(calls, steady(2500*time.Millisecond, 1500*time.Millisecond, 74, loadgen.OK, o.S)...)
	calls = append(calls, loadgen.Call{Arrival: 3 * time.Second, Latency: o.deadline() + time.Millisecond, Result: loadgen.OK, Phase: 1})
	rep := &loadgen.Report{Config: loadgen.Config{Deadline: o.deadline()}, Calls: calls}
	for _, p := range phases {
		rep.Config.Phases = append(rep.Config.Phases, loadgen.Phase{Name: p.Name, Duration: p.Duration, Rate: p.rate(o)})
	}
	rows := summarize(rep, o, phases)

	full := rows[0]
	if full.Calls != 300 || full.Good != 150 || full.Rejected != 120 || full.Deadline != 30 {
		t.Errorf("full: calls/good/rejected/deadline = %d/%d/%d/%d, want 300/150/120/30", full.Calls, full.Good, full.Rejected, full.Deadline)
	}
	if full.Ideal != 100 || full.GoodPct() != 100 || full.RejectedPct() != 40 || full.DeadlinePct() != 10 {
		t.Errorf("full: ideal %v, goodput %v%%, rejected %v%%, deadline %v%%; want 100, 100, 40, 10", full.Ideal, full.GoodPct(), full.RejectedPct(), full.DeadlinePct())
	}
	if full.P99 != o.S {
		t.Errorf("full: p99 = %v, want %v", full.P99, o.S)
	}
	half := rows[1]
	if half.Ideal != 50 || half.Good != 74 || half.Deadline != 1 {
		t.Errorf("half: ideal %v, good %d, deadline %d; want 50 (the halved capacity), 74, 1", half.Ideal, half.Good, half.Deadline)
	}
}

func TestSkipFor(t *testing.T) {
	if got := skipFor(time.Second, 6*time.Second); got != time.Second {
		t.Errorf("skipFor(1s, 6s) = %v", got)
	}
	if got := skipFor(time.Second, 300*time.Millisecond); got != 150*time.Millisecond {
		t.Errorf("skipFor(1s, 300ms) = %v, want half the phase", got)
	}
}

func TestJudge(t *testing.T) {
	s := 10 * time.Millisecond
	ok := phaseRow{Ideal: 100, Goodput: 95, Good: 95, P99: 25 * time.Millisecond}
	if got := judge(ok, s, 90, 3); !strings.HasSuffix(got, " met") {
		t.Errorf("judge(ok) = %q, want met", got)
	}
	if got := judge(ok, s, 98, 2); !strings.Contains(got, "goodput 3.00 points short") || !strings.Contains(got, "p99 2.50×S > 2×S") {
		t.Errorf("judge(ok, stricter) = %q, want both misses", got)
	}
	if got := judge(phaseRow{Ideal: 100}, s, 90, 3); !strings.Contains(got, "no good call") {
		t.Errorf("judge(no good call) = %q", got)
	}
}

func TestProfileAndSteps(t *testing.T) {
	o := defaultOptions()
	phases := profile(o)
	_, total := phaseStarts(phases)
	if total != 30*time.Second {
		t.Errorf("default profile lasts %v, want 30s", total)
	}
	if phases[3].Capacity != o.C/2 || phases[4].Capacity != o.C {
		t.Errorf("capacities %d, %d: want halved then restored", phases[3].Capacity, phases[4].Capacity)
	}
	if got := phases[2].rate(o); got != 2000 {
		t.Errorf("5x rate = %v/s, want 2000/s", got)
	}
	if got := stepName(phases, 3); got != "capacity 16→8" {
		t.Errorf("stepName(3) = %q", got)
	}
	if got := phaseAt(phases, 11*time.Second); got != 2 {
		t.Errorf("phaseAt(11s) = %d, want 2", got)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-c", "8", "-s", "25ms", "-phase-scale", "0.5", "-out", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.C != 8 || o.S != 25*time.Millisecond || o.Scale != 0.5 || o.Out != "x" || o.Command != "go run ./demo -c 8 -s 25ms -phase-scale 0.5 -out x" {
		t.Errorf("parseFlags = %+v", o)
	}
	for _, bad := range [][]string{{"-c", "1"}, {"-s", "0"}, {"-phase-scale", "0"}, {"-backend", "lifo"}, {"-out", ""}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestRun runs the whole demo with phases of 250-400ms at low rates and
// checks the files it writes, not the numbers it measures.
func TestRun(t *testing.T) {
	o := testOptions(t)
	o.Scale = 0.05
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"== unprotected run", "== sluice run", "Summary per phase", "Settling after each step", "5x, capacity/2", "wrote "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	report, err := os.ReadFile(filepath.Join(o.Out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Settings", "## Definitions", "## Summary", "## Settling after each step", "unprotected goodput/ideal", "sluice p99", "1x, capacity back", "chart.png"} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("report.md lacks %q", want)
		}
	}

	png, err := os.ReadFile(filepath.Join(o.Out, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("chart.png is not a PNG (%d bytes)", len(png))
	}

	csv, err := os.ReadFile(filepath.Join(o.Out, "seconds.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(csv, []byte("run,second,phase,")) || !bytes.Contains(csv, []byte("\nsluice,")) {
		t.Errorf("seconds.csv:\n%s", csv)
	}
}

// TestMetrics runs a short sluice pass with the Prometheus exporter and
// scrapes sluice's metrics.
func TestMetrics(t *testing.T) {
	o := testOptions(t)
	ms, err := startMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ms.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	phases := []phaseSpec{{Name: "1x", Load: 1, Capacity: o.C, Duration: 300 * time.Millisecond}}
	if _, err := runProfile(context.Background(), "sluice", true, o, phases, ms.Provider(), io.Discard); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + ms.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte("sluice_requests")) {
		t.Errorf("/metrics has no sluice_requests:\n%s", body)
	}
}

func TestSummarizeLag(t *testing.T) {
	ms := time.Millisecond
	got := summarizeLag([]time.Duration{ms, 30 * ms, 2 * ms, 50 * ms}, 20*ms)
	want := lagSummary{Max: 50 * ms, At: 3, Over: 2, OverFrom: 1}
	if got != want {
		t.Errorf("summarizeLag = %+v, want %+v", got, want)
	}
	if got := summarizeLag(nil, ms); got != (lagSummary{}) {
		t.Errorf("summarizeLag(nil) = %+v", got)
	}
}
