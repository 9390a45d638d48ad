// Package loadgen drives open-loop load at a callee and reports what came
// back, for sluice's demo, benchmarks and overload tests.
//
// Open loop means arrivals follow a schedule (a Poisson process at the
// phase's rate) whatever the callee does: a slow callee does not slow the
// arrivals down, as real clients do not wait for each other. That is what
// makes overload visible; a closed loop hides it.
//
// All timing uses the time package, so a run inside a testing/synctest
// bubble takes virtual time and is deterministic for a given Seed.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// A Phase is a stretch of the run at one arrival rate.
type Phase struct {
	Name     string
	Duration time.Duration
	Rate     float64 // arrivals per second; 0 sends nothing
	// Start, if set, runs when the phase begins, e.g. to change the
	// capacity of a simulated backend.
	Start func()
}

// Result classifies how a call ended.
type Result uint8

const (
	OK               Result = iota // the call succeeded
	Rejected                       // shed by overload protection
	DeadlineExceeded               // the call's deadline passed
	Failed                         // any other error
)

func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Rejected:
		return "rejected"
	case DeadlineExceeded:
		return "deadline"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Config describes a run.
type Config struct {
	Phases []Phase
	// Deadline is given to every call through its context.
	Deadline time.Duration
	// Call performs one call.
	Call func(ctx context.Context) error
	// Classify maps Call's error to a Result. The default maps nil to OK,
	// context.DeadlineExceeded to DeadlineExceeded and the rest to Failed.
	Classify func(error) Result
	// Seed makes the arrival times reproducible.
	Seed uint64
	// Tick, if set, is called once a second with the calls that finished
	// in that second, while the run goes on.
	Tick func(Window)
}

// A Call is the record of one call.
type Call struct {
	Arrival time.Duration // since the start of the run
	Latency time.Duration
	Result  Result
	Phase   int // index of the phase the call arrived in
}

// Good reports whether c succeeded within deadline: the definition of
// goodput.
func (c Call) Good(deadline time.Duration) bool {
	return c.Result == OK && c.Latency <= deadline
}

// Report is the record of a whole run.
type Report struct {
	Config   Config
	Calls    []Call // in completion order
	Duration time.Duration
}

func defaultClassify(err error) Result {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	}
	return Failed
}

// Run drives the load described by cfg and returns when every call has
// ended. Cancelling ctx stops new arrivals early; calls in flight then
// see their contexts cancelled.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Call == nil {
		return nil, errors.New("loadgen: Config.Call is nil")
	}
	if cfg.Deadline <= 0 {
		return nil, fmt.Errorf("loadgen: Config.Deadline is %v, must be positive", cfg.Deadline)
	}
	for i, p := range cfg.Phases {
		if p.Duration <= 0 || p.Rate < 0 {
			return nil, fmt.Errorf("loadgen: phase %d (%q) needs a positive duration and a rate >= 0, got %v and %v", i, p.Name, p.Duration, p.Rate)
		}
	}
	classify := cfg.Classify
	if classify == nil {
		classify = defaultClassify
	}

	var (
		mu      sync.Mutex
		calls   []Call
		arrived []int // arrivals per second, for the live ticks
		wg      sync.WaitGroup
	)
	start := time.Now()
	ticker := startTicker(cfg.Tick, func(n int) Window {
		mu.Lock()
		defer mu.Unlock()
		w := Summarize(calls, cfg.Deadline, time.Duration(n-1)*time.Second, time.Duration(n)*time.Second)
		w.Offered = 0
		if n-1 < len(arrived) {
			w.Offered = arrived[n-1]
		}
		return w
	})

	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	phaseStart := time.Duration(0)
arrivals:
	for i, p := range cfg.Phases {
		if p.Start != nil {
			p.Start()
		}
		end := phaseStart + p.Duration
		next := phaseStart
		for {
			if p.Rate > 0 {
				next += time.Duration(rng.ExpFloat64() / p.Rate * float64(time.Second))
			} else {
				next = end
			}
			if next >= end {
				break
			}
			// Sleep until the next arrival; when the timer is late,
			// launch everything due at once so the rate stays exact.
			if d := next - time.Since(start); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					break arrivals
				}
			}
			mu.Lock()
			for sec := int(next / time.Second); len(arrived) <= sec; {
				arrived = append(arrived, 0)
			}
			arrived[next/time.Second]++
			mu.Unlock()
			wg.Add(1)
			go func(arrival time.Duration, phase int) {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, cfg.Deadline)
				t0 := time.Now()
				err := cfg.Call(cctx)
				lat := time.Since(t0)
				cancel()
				c := Call{Arrival: arrival, Latency: lat, Result: classify(err), Phase: phase}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
			}(next, i)
		}
		// Wait out the rest of the phase, so phases keep their length.
		if d := end - time.Since(start); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				break arrivals
			}
		}
		phaseStart = end
	}
	wg.Wait()
	ticker.stop()
	return &Report{Config: cfg, Calls: calls, Duration: time.Since(start)}, nil
}

// A Window summarizes the calls that finished within one stretch of time.
type Window struct {
	Start, End time.Duration // since the start of the run
	Offered    int           // calls that arrived in the window
	Good       int           // succeeded within their deadline
	Rejected   int
	Deadline   int // DeadlineExceeded, plus successes that came back late
	Failed     int
	P50, P99   time.Duration // latency percentiles of the good calls
}

// Seconds returns the window's length in seconds.
func (w Window) Seconds() float64 { return (w.End - w.Start).Seconds() }

// Summarize builds the Window of calls finished in [from, to) out of calls.
// Offered counts arrivals in the same interval.
func Summarize(calls []Call, deadline, from, to time.Duration) Window {
	w := Window{Start: from, End: to}
	var lat []time.Duration
	for _, c := range calls {
		if c.Arrival >= from && c.Arrival < to {
			w.Offered++
		}
		if done := c.Arrival + c.Latency; done < from || done >= to {
			continue
		}
		switch {
		case c.Good(deadline):
			w.Good++
			lat = append(lat, c.Latency)
		case c.Result == OK || c.Result == DeadlineExceeded:
			w.Deadline++
		case c.Result == Rejected:
			w.Rejected++
		default:
			w.Failed++
		}
	}
	w.P50, w.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	return w
}

// Percentile returns the q-quantile (0 < q <= 1) of d by the nearest-rank
// method, or 0 for an empty slice. It sorts d.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*q+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// Seconds splits the run into one-second Windows.
func (r *Report) Seconds() []Window {
	var out []Window
	for t := time.Duration(0); t < r.Duration; t += time.Second {
		out = append(out, Summarize(r.Calls, r.Config.Deadline, t, t+time.Second))
	}
	return out
}

// PhaseSummary summarizes the calls that arrived in phase i, skipping the
// first skip of the phase so that a summary can leave out the transient.
type PhaseSummary struct {
	Phase    Phase
	Offered  float64 // arrivals per second
	Goodput  float64 // good calls per second
	Calls    int
	Good     int
	Rejected int
	Deadline int
	Failed   int
	P50, P99 time.Duration
}

// Phase summarizes the calls that arrived in phase i after its first skip.
func (r *Report) Phase(i int, skip time.Duration) PhaseSummary {
	start := time.Duration(0)
	for _, p := range r.Config.Phases[:i] {
		start += p.Duration
	}
	p := r.Config.Phases[i]
	from, to := start+skip, start+p.Duration
	s := PhaseSummary{Phase: p}
	var lat []time.Duration
	for _, c := range r.Calls {
		if c.Arrival < from || c.Arrival >= to {
			continue
		}
		s.Calls++
		switch {
		case c.Good(r.Config.Deadline):
			s.Good++
			lat = append(lat, c.Latency)
		case c.Result == OK || c.Result == DeadlineExceeded:
			s.Deadline++
		case c.Result == Rejected:
			s.Rejected++
		default:
			s.Failed++
		}
	}
	secs := (to - from).Seconds()
	if secs > 0 {
		s.Offered = float64(s.Calls) / secs
		s.Goodput = float64(s.Good) / secs
	}
	s.P50, s.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	return s
}

// ticker reports a Window every second while a run goes on.
type ticker struct {
	done chan struct{}
	wg   sync.WaitGroup
}

// startTicker calls tick with window(n) at the end of every second n.
func startTicker(tick func(Window), window func(n int) Window) *ticker {
	t := &ticker{done: make(chan struct{})}
	if tick == nil {
		return t
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for n := 1; ; n++ {
			select {
			case <-tk.C:
			case <-t.done:
				return
			}
			tick(window(n))
		}
	}()
	return t
}

func (t *ticker) stop() {
	close(t.done)
	t.wg.Wait()
}
