// Package limitload drives a limiter.Limiter in front of a simulated
// backend with loadgen's open-loop load, in the virtual time of a
// synctest bubble: the overload checks of package limiter and the
// measurements of the bench module share it.
package limitload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/overrun"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/limiter"
)

// Call is one call: a permit from lim, then the backend, and the outcome
// a server would report: a deadline overrun is a drop.
func Call(ctx context.Context, lim *limiter.Limiter, be backend.Backend) error {
	return CallFor(ctx, lim, be, "")
}

// CallFor is Call for a call of caller, sharing the limit fairly among
// callers (limiter.AcquireFor); the empty caller is Call.
func CallFor(ctx context.Context, lim *limiter.Limiter, be backend.Backend, caller string) error {
	acquire := lim.Acquire
	if caller != "" {
		acquire = func(ctx context.Context) (limiter.Token, error) { return lim.AcquireFor(ctx, caller) }
	}
	tok, err := acquire(ctx)
	if err != nil {
		return err
	}
	err = be.Do(ctx)
	outcome := limiter.Success
	if errors.Is(err, context.DeadlineExceeded) {
		outcome = limiter.Dropped
	}
	tok.Release(outcome)
	return err
}

// A Server reports calls as a server interceptor does: an overrun is
// Ignored when overrun.Baseline says it was the caller's doing, a drop
// otherwise. The interceptor's rule, for loads in virtual time. Its zero
// value is ready; it must not be copied.
type Server struct {
	rtt overrun.Baseline
}

// Call is Call with the server's rule of overruns.
func (v *Server) Call(ctx context.Context, lim *limiter.Limiter, be backend.Backend) error {
	tok, err := lim.Acquire(ctx)
	if err != nil {
		return err
	}
	err = be.Do(ctx)
	o := v.outcome(err, time.Since(tok.Granted()))
	if rtt := tok.Release(o); o == limiter.Success && rtt > 0 {
		v.rtt.Observe(rtt)
	}
	return err
}

// outcome classifies a call that held its permit for held and ended with
// err.
func (v *Server) outcome(err error, held time.Duration) limiter.Outcome {
	switch {
	case !errors.Is(err, context.DeadlineExceeded):
		return limiter.Success
	case v.rtt.CallersFault(held):
		return limiter.Ignored
	}
	return limiter.Dropped
}

// Classify sorts Call's errors for loadgen; other errors (a handler's own
// refusal) are Failed.
func Classify(err error) loadgen.Result {
	switch {
	case err == nil:
		return loadgen.OK
	case errors.Is(err, limiter.ErrLimitExceeded), errors.Is(err, limiter.ErrOverShare):
		return loadgen.Rejected
	case errors.Is(err, context.DeadlineExceeded):
		return loadgen.DeadlineExceeded
	}
	return loadgen.Failed
}

// Run offers rate Poisson arrivals a second for d, each a Call with a
// deadline of 10 service times s, and reports every call.
func Run(lim *limiter.Limiter, be backend.Backend, s time.Duration, rate float64, d time.Duration, seed uint64) (*loadgen.Report, error) {
	return loadgen.Run(context.Background(), loadgen.Config{
		Phases:   []loadgen.Phase{{Name: fmt.Sprintf("%.0f calls/s", rate), Duration: d, Rate: rate}},
		Deadline: 10 * s,
		Seed:     seed,
		Call:     func(ctx context.Context) error { return Call(ctx, lim, be) },
		Classify: Classify,
	})
}

// SampleEvery calls fn every d from after on, by the clock of the synctest
// bubble it runs in, until stop is called. stop waits for the last call
// to return, so fn's results can be read after it, and may be called more
// than once.
func SampleEvery(d, after time.Duration, fn func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		begin := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if now.Sub(begin) >= after {
					fn()
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// ErrRefused is the handler's own refusal of a Shape's Refuse-th calls: a
// per-caller quota, not overload.
var ErrRefused = errors.New("refused by the handler")

// A Shape is one load held against one backend and one algorithm.
type Shape struct {
	Kind   string       // "fifo" or "ps"
	Dist   backend.Dist // of the service times
	Load   float64      // offered load, a multiple of C/S
	Refuse int          // every Refuse-th call is refused by the handler; 0 none
	Cold   bool         // the load from the first call, no warm-up at half load
	Seed   uint64
	// Duration of the load, after 3 s at half load (unless Cold); 0 is 20 s.
	Duration time.Duration
	// Scale multiplies the warm-up, the default Duration and the first 4 s
	// the summary leaves out; 0 is 1. S/20ms gives every S the calls the
	// run has at S = 20 ms.
	Scale float64
	// Algorithm makes the limiter's algorithm; nil is the default.
	Algorithm limiter.AlgorithmConfig
	// Server reports overruns as a server interceptor does (Server.Call):
	// one within twice the learned RTT is Ignored. Otherwise every
	// overrun is a drop, as a client reports it.
	Server bool
	// Tick, if set, is called at the end of every second with the calls
	// that finished in it and the limiter's limit and calls in flight.
	Tick func(w loadgen.Window, limit, inflight int)
	// Lag, if set, is this process's own work per call, which grows with
	// the calls it holds (a handler's decoding and encoding, the
	// scheduler's wake-ups): before and after the backend's call, each
	// call holds its permit for an exponential time of mean Lag/2 × the
	// calls in flight. Over real gRPC that time moves RTTs under load,
	// not during a probe at a shallow depth.
	Lag time.Duration
}

// lagged is a backend whose calls first and last spend a draw of lag.
type lagged struct {
	backend.Backend
	lag func() time.Duration
}

func (b lagged) Do(ctx context.Context) error {
	time.Sleep(b.lag())
	defer func() { time.Sleep(b.lag()) }()
	return b.Backend.Do(ctx)
}

func (b lagged) DoFor(ctx context.Context, d time.Duration) error {
	time.Sleep(b.lag())
	defer func() { time.Sleep(b.lag()) }()
	return b.Backend.DoFor(ctx, d)
}

// lagDraws returns Shape.Lag's draws for the calls lim holds, seeded.
func lagDraws(mean time.Duration, lim *limiter.Limiter, seed uint64) func() time.Duration {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0x1a9))
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(rng.ExpFloat64() * float64(mean) / 2 * float64(lim.Inflight()))
	}
}

// A ShapeResult summarizes a Shape's load after its first 4 s: goodput as
// a share of ideal, p50 and p99 of successes in service times, the shares
// of calls the limiter rejected and the handler refused, and the mean
// limit over the whole run in multiples of the capacity.
type ShapeResult struct {
	Good, P50, P99, Rejected, Refused, MeanLimit float64
}

// RunShape drives a Limiter with r's load against a backend of capacity c
// and service time s, and summarizes it. It must run inside a synctest
// bubble.
func RunShape(r Shape, c int, s time.Duration) (ShapeResult, error) {
	if r.Lag < 0 {
		return ShapeResult{}, fmt.Errorf("a lag of %v: want 0 or more", r.Lag)
	}
	be, err := backend.New(r.Kind, c, s, r.Dist, r.Seed)
	if err != nil {
		return ShapeResult{}, err
	}
	var opts []limiter.Option
	if r.Algorithm != nil {
		alg, err := r.Algorithm.New()
		if err != nil {
			return ShapeResult{}, err
		}
		opts = append(opts, limiter.WithAlgorithm(alg))
	}
	lim, err := limiter.New(opts...)
	if err != nil {
		return ShapeResult{}, err
	}
	if r.Lag > 0 {
		be = lagged{Backend: be, lag: lagDraws(r.Lag, lim, r.Seed)}
	}
	rate := float64(c) / s.Seconds()
	warm := 0.5 * rate
	if r.Cold {
		warm = r.Load * rate
	}
	if r.Scale == 0 {
		r.Scale = 1
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * r.Scale) }
	if r.Duration == 0 {
		r.Duration = scale(20 * time.Second)
	}
	var n atomic.Int64
	var limitSum, limitN float64
	var server Server
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		Phases: []loadgen.Phase{
			{Name: "warm-up", Duration: scale(3 * time.Second), Rate: warm},
			{Name: "load", Duration: r.Duration, Rate: r.Load * rate},
		},
		Deadline: 10 * s,
		Seed:     r.Seed,
		Tick: func(w loadgen.Window) {
			limitSum += float64(lim.Limit())
			limitN++
			if r.Tick != nil {
				r.Tick(w, lim.Limit(), lim.Inflight())
			}
		},
		Call: func(ctx context.Context) error {
			if r.Refuse > 0 && n.Add(1)%int64(r.Refuse) == 0 {
				// The handler's own refusal, before any work.
				tok, err := lim.Acquire(ctx)
				if err != nil {
					return err
				}
				tok.Release(limiter.Dropped)
				return ErrRefused
			}
			if r.Server {
				return server.Call(ctx, lim, be)
			}
			return Call(ctx, lim, be)
		},
		Classify: Classify,
	})
	if err != nil {
		return ShapeResult{}, err
	}
	if n := lim.Inflight(); n != 0 {
		return ShapeResult{}, fmt.Errorf("%d calls in flight after the run", n)
	}
	p := rep.Phase(1, scale(4*time.Second))
	ideal := min(p.Offered, rate) * (1 - float64(p.Failed)/float64(p.Calls))
	return ShapeResult{
		Good:      p.Goodput / ideal,
		P50:       float64(p.P50) / float64(s),
		P99:       float64(p.P99) / float64(s),
		Rejected:  float64(p.Rejected) / float64(p.Calls),
		Refused:   float64(p.Failed) / float64(p.Calls),
		MeanLimit: limitSum / max(limitN, 1) / float64(c),
	}, nil
}

// RunTenants offers each of loads (multiples of the capacity c/s) as a
// caller of its own, for d after 2 s at the same loads, to one default
// Limiter in front of a backend; with fair, each caller's calls are
// AcquireFor it. It returns each caller's summary after the first 2 s of
// the measured phase. It must run inside a synctest bubble.
func RunTenants(kind string, dist backend.Dist, c int, s time.Duration, loads []float64, fair bool, d time.Duration, seed uint64) ([]loadgen.PhaseSummary, error) {
	be, err := backend.New(kind, c, s, dist, seed)
	if err != nil {
		return nil, err
	}
	lim, err := limiter.New()
	if err != nil {
		return nil, err
	}
	reps := make([]*loadgen.Report, len(loads))
	errs := make([]error, len(loads))
	var wg sync.WaitGroup
	for i, load := range loads {
		caller := ""
		if fair {
			caller = fmt.Sprintf("tenant-%d", i)
		}
		rate := load * float64(c) / s.Seconds()
		wg.Go(func() {
			reps[i], errs[i] = loadgen.Run(context.Background(), loadgen.Config{
				Phases:   []loadgen.Phase{{Name: "warm-up", Duration: 2 * time.Second, Rate: rate}, {Name: "load", Duration: d, Rate: rate}},
				Deadline: 10 * s,
				Seed:     seed*1000 + uint64(i),
				Call:     func(ctx context.Context) error { return CallFor(ctx, lim, be, caller) },
				Classify: Classify,
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make([]loadgen.PhaseSummary, len(loads))
	for i, r := range reps {
		out[i] = r.Phase(1, 2*time.Second)
	}
	return out, nil
}
