package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/backend"
	"github.com/sluice-go/sluice/internal/testbed/loadgen"
	"github.com/sluice-go/sluice/internal/testbed/overload"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// A phaseSpec is one step of the load profile.
type phaseSpec struct {
	Name     string
	Load     float64 // offered load, as a multiple of the full capacity C/S
	Capacity int     // backend workers during the phase
	Duration time.Duration
}

// rate is the phase's arrival rate in calls per second.
func (p phaseSpec) rate(o options) float64 { return p.Load * float64(o.C) / o.S.Seconds() }

// capacityRate is what the backend can serve during the phase, per second.
func (p phaseSpec) capacityRate(o options) float64 { return float64(p.Capacity) / o.S.Seconds() }

// idealFor is the best goodput possible with offered calls per second.
func (p phaseSpec) idealFor(o options, offered float64) float64 {
	return min(offered, p.capacityRate(o))
}

// profile is the load profile of both runs.
func profile(o options) []phaseSpec {
	d := func(sec float64) time.Duration { return time.Duration(sec * o.Scale * float64(time.Second)) }
	half := max(o.C/2, 1)
	return []phaseSpec{
		{Name: "0.5x", Load: 0.5, Capacity: o.C, Duration: d(5)},
		{Name: "2x", Load: 2, Capacity: o.C, Duration: d(6)},
		{Name: "5x", Load: 5, Capacity: o.C, Duration: d(8)},
		{Name: "5x, capacity/2", Load: 5, Capacity: half, Duration: d(6)},
		{Name: "1x, capacity back", Load: 1, Capacity: o.C, Duration: d(5)},
	}
}

// phaseStarts returns the start of each phase since the start of the run,
// and the end of the last one.
func phaseStarts(phases []phaseSpec) (starts []time.Duration, end time.Duration) {
	for _, p := range phases {
		starts = append(starts, end)
		end += p.Duration
	}
	return starts, end
}

// phaseAt returns the index of the phase running at t.
func phaseAt(phases []phaseSpec, t time.Duration) int {
	starts, _ := phaseStarts(phases)
	i := 0
	for j, s := range starts {
		if t >= s {
			i = j
		}
	}
	return i
}

// A limitSample is the sluice limiter's state at one instant.
type limitSample struct {
	T                       time.Duration // since the start of the run
	Limit, Inflight, Queued int
}

// A runResult is what one run of the profile produced.
type runResult struct {
	Name    string
	Sluice  bool
	Report  *loadgen.Report
	Samples []limitSample // sluice's limiter every sampleEvery; nil unprotected
	CPU     time.Duration // CPU time the process used during the run
	Wall    time.Duration
	Lags    []time.Duration // worst timer lag in each second (see overload.LagMonitor)
	Load    [2]string       // the machine's load average before and after
}

// lagLimit is the timer lag above which a second's numbers say more about
// the machine than about the server.
func (o options) lagLimit() time.Duration { return o.S / 2 }

const sampleEvery = 100 * time.Millisecond

// runProfile runs the load profile once against a fresh server and
// backend, protected by sluice's defaults or not. mp, if set, receives
// sluice's metrics.
func runProfile(ctx context.Context, name string, protected bool, o options, phases []phaseSpec, mp metric.MeterProvider, out io.Writer) (*runResult, error) {
	be, err := backend.New(o.Backend, o.C, o.S, backend.Constant, 1)
	if err != nil {
		return nil, err
	}

	var (
		lim     *interceptor.Server
		srvOpts []grpc.ServerOption
	)
	if protected {
		// The defaults: no algorithm, limit, queue or timeout is given.
		// WithMeterProvider only says where the metrics go.
		var opts []interceptor.ServerOption
		if mp != nil {
			opts = append(opts, interceptor.WithMeterProvider(mp))
		}
		lim, err = interceptor.NewServer(opts...)
		if err != nil {
			return nil, err
		}
		defer lim.Close()
		srvOpts = lim.ServerOptions()
	}

	gs := grpc.NewServer(srvOpts...)
	testpb.RegisterTestServiceServer(gs, overload.Service(be))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	defer func() {
		gs.Stop()
		<-served
	}()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := overload.Connect(ctx, conn); err != nil {
		return nil, err
	}
	client := testpb.NewTestServiceClient(conn)

	state := func() (interceptor.LimiterState, bool) {
		if lim == nil {
			return interceptor.LimiterState{}, false
		}
		ls := lim.Limiters()
		if len(ls) == 0 {
			return interceptor.LimiterState{}, false
		}
		return ls[0], true
	}

	lp := make([]loadgen.Phase, len(phases))
	for i, p := range phases {
		lp[i] = loadgen.Phase{
			Name:     p.Name,
			Duration: p.Duration,
			Rate:     p.rate(o),
			Start: func() {
				if be.Capacity() != p.Capacity {
					// Cannot fail: the capacity was checked to be >= 1.
					_ = be.SetCapacity(p.Capacity)
				}
			},
		}
	}

	tick := func(w loadgen.Window) {
		if o.Quiet {
			return
		}
		limit := "-"
		if s, ok := state(); ok {
			limit = fmt.Sprintf("%d (%d in flight)", s.Limit, s.Inflight)
		}
		fmt.Fprintf(out, "%-11s %3.0fs  %-17s offered %5d/s  goodput %5d/s  p99 %6s  rejected %5d  deadline %5d  limit %s\n",
			name, w.End.Seconds(), phases[phaseAt(phases, w.Start)].Name,
			w.Offered, w.Good, fmtMs(w.P99), w.Rejected, w.Deadline, limit)
	}

	// Sample the limiter more often than once a second for the chart.
	var (
		samples []limitSample
		smu     sync.Mutex
		swg     sync.WaitGroup
	)
	stopSampling := make(chan struct{})
	start := time.Now()
	if lim != nil {
		swg.Add(1)
		go func() {
			defer swg.Done()
			t := time.NewTicker(sampleEvery)
			defer t.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case now := <-t.C:
					if s, ok := state(); ok {
						smu.Lock()
						samples = append(samples, limitSample{T: now.Sub(start), Limit: s.Limit, Inflight: s.Inflight, Queued: s.Queued})
						smu.Unlock()
					}
				}
			}
		}()
	}

	load0 := overload.LoadAverage()
	lags := overload.StartLagMonitor(start)
	cpu0 := overload.ProcessCPU()
	rep, err := loadgen.Run(ctx, loadgen.Config{
		Phases:   lp,
		Deadline: o.deadline(),
		Call: func(ctx context.Context) error {
			_, err := client.Unary(ctx, &testpb.UnaryRequest{})
			return err
		},
		Classify: overload.Classify,
		Seed:     o.Seed,
		Tick:     tick,
	})
	cpu := overload.ProcessCPU() - cpu0
	lagPerSecond := lags.Stop()
	close(stopSampling)
	swg.Wait()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s run interrupted: %w", name, ctx.Err())
	}
	return &runResult{Name: name, Sluice: protected, Report: rep, Samples: samples, CPU: cpu, Wall: rep.Duration,
		Lags: lagPerSecond, Load: [2]string{load0, overload.LoadAverage()}}, nil
}

// machine describes where the demo ran, for the report.
func machine() string {
	return fmt.Sprintf("%s/%s, %d CPU cores (GOMAXPROCS %d), %s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
}

// fmtMs formats d in milliseconds, "-" for 0 (no call to measure).
func fmtMs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}
