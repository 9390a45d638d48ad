package interceptor

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"

	"github.com/sluice-go/sluice/limiter"
)

// WithLoadReports makes a Server tell its clients how loaded it is, in
// ORCA load reports, so that a client balancing over a fleet with gRPC's
// weighted_round_robin policy sends less to the servers that shed. Each
// limiter protects one process; the reports are how its limit reaches the
// clients of the whole fleet. Every limited call that reaches the
// interceptors, rejected ones included, carries in its trailer the figures
// of the limiter it went through (a call WithEarlyRejection's tap rejects
// carries none, grpc-go sends its status bare, but it counts in the
// figures of the calls that follow):
//
//   - application_utilization: (in flight + queued) / limit, averaged
//     over the calls of the last one to two seconds. weighted_round_robin
//     reads this field first and cpu_utilization only when it is 0, so
//     sluice leaves cpu_utilization to the application.
//   - rps_fractional: the calls the limiter admitted per second. With the
//     utilization, it gives the weight qps / utilization, which by Little's
//     law is limit / latency: the throughput the server sustains.
//   - eps: the calls per second that failed for overload: rejected by the
//     limiter (its limit, a priority's share, the method's rate, a queue
//     wait the server made too long), in the interceptors or in the tap,
//     or admitted and then late by the server's doing or failed with an
//     error the Classifier takes for a drop. weighted_round_robin turns it
//     into a penalty: weight = qps / (utilization + eps/qps × penalty), so
//     a server that sheds, or whose limit is still too high to keep its
//     calls in time, gets less. What a caller brings on itself (its own
//     quota, WithCallerLimiter; its cancellations; deadlines shorter
//     than the server's calls take, by the rule of Server) does not count:
//     one caller must not steer the fleet's traffic away from a healthy
//     server. A flood one caller sends into a shared limit does count:
//     its calls compete for the permits and the rate every caller shares,
//     so while it lasts this server does turn away the calls of others,
//     and their clients do well to send them elsewhere. To keep one
//     caller's flood out of eps, give callers a quota: the calls it
//     refuses spend nothing shared and are not counted.
//
// Server.ServerOptions then installs orca.CallMetricsServerOption(nil)
// ahead of sluice's interceptors; if you install the interceptors yourself,
// put that option first. Server.RegisterLoadReports adds the out-of-band
// ORCA service for clients that enable enableOobLoadReport. Without this
// option the interceptors do none of this work. Reload cannot turn it on
// or off.
//
// Clients receive load reports; they do not send them.
func WithLoadReports() ServerOption {
	return serverOption(func(c *config) { c.loadReports = true })
}

// loadWindow is the span over which load reports average: a report covers
// the last full window and the current partial one.
const loadWindow = time.Second

// A loadReporter keeps the load figures of a Server's limiters.
type loadReporter struct {
	c     *core
	now   func() time.Time
	loads sync.Map // weak.Pointer[gate] -> *gateLoad
}

func newLoadReporter(c *core) *loadReporter {
	l := &loadReporter{c: c, now: time.Now}
	c.onReject = func(ctx context.Context, g *gate, reason string) {
		if lc, ok := ctx.Value(loadCallKey{}).(*loadCall); ok {
			lc.reason = reason // the interceptor reports the call
			return
		}
		// Rejected in WithEarlyRejection's tap: no interceptor sees the
		// call, and grpc-go sends its status without a trailer, so it is
		// counted here and reported by the calls that follow.
		l.load(g).rejected(l.now(), overloadRejection(g, reason, time.Time{}), utilization(g))
	}
	return l
}

// A loadCall carries, in a call's context, what the limiter decided.
type loadCall struct {
	arrived time.Time
	reason  string // why the call was rejected, if it was
}

type loadCallKey struct{}

// A loadStream is a ServerStream whose context carries a loadCall.
type loadStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *loadStream) Context() context.Context { return s.ctx }

// overloadRejection reports whether a rejection says the server is
// overloaded. A caller's own quota (caller_rate), its fair share
// (fair_share: the light callers' rejections, if any, say whether the
// server is full), its cancellation and a deadline that ran out in the
// queue faster than the server's calls take (see serverLate) are the
// caller's doing: counted, they would let one caller steer the whole
// fleet's traffic away from a healthy server.
func overloadRejection(g *gate, reason string, arrived time.Time) bool {
	switch reason {
	case reasonLimit, reasonPriority, reasonRate:
		return true
	case reasonDeadline:
		return serverLate(g, arrived)
	}
	return false
}

// serverLate is the rule of Server.finishServer: a call whose deadline
// passed is the server's doing only when the server held it for more than
// overrun.Factor × the RTT its limiter has seen calls take.
func serverLate(g *gate, arrived time.Time) bool {
	return g.rtt.ServersFault(time.Since(arrived))
}

// gateLoad counts the decisions of one limiter in two windows.
type gateLoad struct {
	mu        sync.Mutex
	start     time.Time // of cur
	cur, prev loadCounts
	prevLen   time.Duration
}

type loadCounts struct {
	admitted, rejected int
	failed             int     // admitted, then failed for overload
	util               float64 // sum of the utilization samples
	samples            int
}

// A loadFigures is what a report says about one limiter.
type loadFigures struct {
	util, qps, eps float64
	samples        int
}

// load returns the gateLoad of g, creating it on g's first call. The entry
// goes when g is collected, after a Reload replaced it.
func (l *loadReporter) load(g *gate) *gateLoad {
	k := weak.Make(g)
	if v, ok := l.loads.Load(k); ok {
		return v.(*gateLoad)
	}
	v, loaded := l.loads.LoadOrStore(k, &gateLoad{start: l.now()})
	if !loaded {
		runtime.AddCleanup(g, func(k weak.Pointer[gate]) { l.loads.Delete(k) }, k)
	}
	return v.(*gateLoad)
}

// utilization is how full g's limiter is, queue included.
func utilization(g *gate) float64 {
	limit := g.lim.Limit()
	if limit <= 0 {
		return 1
	}
	return float64(g.lim.Inflight()+g.lim.QueueLen()) / float64(limit)
}

// record counts one decision and returns the figures to report.
func (gl *gateLoad) record(now time.Time, rejected bool, util float64) loadFigures {
	gl.mu.Lock()
	defer gl.mu.Unlock()
	gl.rollLocked(now)
	if rejected {
		gl.cur.rejected++
	} else {
		gl.cur.admitted++
	}
	gl.cur.util += util
	gl.cur.samples++
	return gl.figuresLocked(now)
}

// rejected records a rejection that says the server is overloaded and
// only returns the figures for one that does not: those neither count as
// errors nor sample the utilization (a caller over its own quota may find
// the limiter idle).
func (gl *gateLoad) rejected(now time.Time, overload bool, util float64) loadFigures {
	if overload {
		return gl.record(now, true, util)
	}
	return gl.figures(now)
}

// fail counts an admitted call that failed for overload.
func (gl *gateLoad) fail(now time.Time) {
	gl.mu.Lock()
	defer gl.mu.Unlock()
	gl.rollLocked(now)
	gl.cur.failed++
}

func (gl *gateLoad) figures(now time.Time) loadFigures {
	gl.mu.Lock()
	defer gl.mu.Unlock()
	gl.rollLocked(now)
	return gl.figuresLocked(now)
}

// rollLocked starts a new window once the current one is loadWindow old.
// A window that saw no call for long is one long window, whose rates are
// accordingly low.
func (gl *gateLoad) rollLocked(now time.Time) {
	if d := now.Sub(gl.start); d >= loadWindow {
		gl.prev, gl.prevLen = gl.cur, d
		gl.cur, gl.start = loadCounts{}, now
	}
}

func (gl *gateLoad) figuresLocked(now time.Time) loadFigures {
	span := (gl.prevLen + now.Sub(gl.start)).Seconds()
	n := gl.prev.samples + gl.cur.samples
	if n == 0 || span <= 0 {
		return loadFigures{}
	}
	// A span shorter than a window (the first calls of a limiter) would
	// give rates far from the truth; a window is the least it counts.
	span = max(span, loadWindow.Seconds())
	return loadFigures{
		util:    (gl.prev.util + gl.cur.util) / float64(n),
		qps:     float64(gl.prev.admitted+gl.cur.admitted) / span,
		eps:     float64(gl.prev.rejected+gl.cur.rejected+gl.prev.failed+gl.cur.failed) / span,
		samples: n,
	}
}

// report writes f into the call's ORCA recorder, if the call has one.
func report(ctx context.Context, f loadFigures) {
	rec := orca.CallMetricsRecorderFromContext(ctx)
	if rec == nil {
		return
	}
	rec.SetApplicationUtilization(f.util)
	rec.SetQPS(f.qps)
	rec.SetEPS(f.eps)
}

// failedForOverload reports whether an admitted call failed the way an
// overloaded server fails, by the rules the limiter itself follows (see
// Server): a unary call that ended after its deadline counts only when
// the server's own time made it late, whatever it returned; any other
// call counts when the Classifier takes it for a drop.
func failedForOverload(ctx context.Context, r *route, lc *loadCall, res Result) bool {
	if late(ctx) {
		if res.Stream || !serverLate(r.gate, lc.arrived) {
			return false
		}
		res.Late = true
	}
	return r.t.classifier(res) == limiter.Dropped
}

// unary wraps sluice's unary interceptor next: a call whose handler never
// ran and that failed was turned away by the limiter.
func (l *loadReporter) unary(next grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r := l.c.tab.Load().lookup(info.FullMethod)
		g := r.gate
		if g == nil {
			return next(ctx, req, info, handler)
		}
		gl := l.load(g)
		lc := &loadCall{arrived: l.now()}
		ran := false
		resp, err := next(context.WithValue(ctx, loadCallKey{}, lc), req, info, func(ctx context.Context, req any) (any, error) {
			ran = true
			// Reported before the handler runs, so that a handler may
			// override the figures with its own.
			report(ctx, gl.record(l.now(), false, utilization(g)))
			resp, err := handler(ctx, req)
			if failedForOverload(ctx, r, lc, Result{FullMethod: info.FullMethod, Err: err}) {
				gl.fail(l.now())
			}
			return resp, err
		})
		if !ran && err != nil {
			report(ctx, gl.rejected(l.now(), overloadRejection(g, lc.reason, lc.arrived), utilization(g)))
		}
		return resp, err
	}
}

// stream is unary's counterpart for streams.
func (l *loadReporter) stream(next grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		// Routed as Server.stream routes it: a method grpc-go hands to
		// grpc.UnknownServiceHandler (srv is nil) is named by the caller
		// and must not get a limiter, a route or a load of its own.
		var r *route
		if srv == nil {
			r = l.c.tab.Load().lookupOther(info.FullMethod)
		} else {
			r = l.c.tab.Load().lookup(info.FullMethod)
		}
		g := r.gate
		if g == nil {
			return next(srv, ss, info, handler)
		}
		gl := l.load(g)
		lc := &loadCall{arrived: l.now()}
		ran := false
		ls := &loadStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), loadCallKey{}, lc)}
		err := next(srv, ls, info, func(srv any, ss grpc.ServerStream) error {
			ran = true
			report(ss.Context(), gl.record(l.now(), false, utilization(g)))
			err := handler(srv, ss)
			// ss is the limiting interceptor's watchedStream: a failure of
			// the caller's own bytes is not the server's (see Server).
			if ws, ok := ss.(*watchedStream); ok && ws.failedWith(err) {
				return err
			}
			if failedForOverload(ss.Context(), r, lc, Result{FullMethod: info.FullMethod, Err: err, Stream: true}) {
				gl.fail(l.now())
			}
			return err
		})
		if !ran && err != nil {
			report(ss.Context(), gl.rejected(l.now(), overloadRejection(g, lc.reason, lc.arrived), utilization(g)))
		}
		return err
	}
}

// ServerMetrics implements orca.ServerMetricsProvider for the out-of-band
// service: the utilization of the busiest limiter that saw calls, and the
// admitted and rejected calls per second of all of them.
func (l *loadReporter) ServerMetrics() *orca.ServerMetrics {
	now := l.now()
	sm := &orca.ServerMetrics{
		CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1,
		Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: map[string]float64{},
	}
	var seen bool
	l.loads.Range(func(k, v any) bool {
		if k.(weak.Pointer[gate]).Value() == nil {
			return true
		}
		f := v.(*gateLoad).figures(now)
		if f.samples == 0 {
			return true
		}
		if !seen {
			sm.AppUtilization, sm.QPS, sm.EPS, seen = 0, 0, 0, true
		}
		sm.AppUtilization = max(sm.AppUtilization, f.util)
		sm.QPS += f.qps
		sm.EPS += f.eps
		return true
	})
	return sm
}

// withLoadReports adds what WithLoadReports needs to opts, s's
// interceptors: the ORCA per-call recorder must come first.
func (s *Server) withLoadReports(opts []grpc.ServerOption) []grpc.ServerOption {
	return append([]grpc.ServerOption{orca.CallMetricsServerOption(nil)}, opts...)
}

// RegisterLoadReports registers the ORCA out-of-band load reporting
// service on reg, for clients whose weighted_round_robin config sets
// enableOobLoadReport: they get the server's figures (see WithLoadReports;
// the busiest limiter's utilization, the sums of the rates) every 30 s or
// at the interval they ask for, without waiting for a call to end. Most
// fleets need only the per-call reports; use this when calls are long or
// rare. The service is exempt from limiting (DefaultExempt). It needs
// WithLoadReports.
func (s *Server) RegisterLoadReports(reg grpc.ServiceRegistrar) error {
	if s.load == nil {
		return errors.New("interceptor: RegisterLoadReports needs a Server made with WithLoadReports")
	}
	return orca.Register(reg, orca.ServiceOptions{ServerMetricsProvider: s.load})
}
