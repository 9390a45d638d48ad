package interceptor

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluice-go/sluice/internal/overrun"
	"github.com/sluice-go/sluice/limiter"
)

// WithEarlyRejection makes a Server take each call's permit, and check its
// rate limits, before grpc-go reads and decodes the request, in a
// tap.ServerInHandle that ServerOptions installs. Under overload most calls
// are rejected, and a unary interceptor only runs once grpc-go has read and
// unmarshalled the whole request: with large requests that decoding is most
// of what a rejected call costs. The interceptors then use the permit the
// tap took, and it is released on every path, also when the call never
// reaches them (the stream fails, the connection closes).
//
// A caller controls when its request follows its headers. A permit the
// tap took waits for the call's interceptor at most twice the RTT its
// limiter has seen calls take, within [10ms, 1s] (100ms before the first
// call finished): then it is given back, and the interceptor, if the
// request comes after all, takes a permit the usual way. Headers alone
// thus hold a permit no longer than a call or two of the method would.
// The clock of a call starts when its interceptor runs, not at the
// headers: a request sent late does not make the method look slow.
//
// The tap runs on the connection's reader, which must not wait, so it
// never queues: a call of a Limit with a Queue, and the first call of each
// method (whose limiter does not exist yet), are left to the interceptors
// as without this option. The callerkey.Func of WithCallerLimiter and the
// trust function of WithPriorities run there too and must be quick; a
// panic in either fails the call with INTERNAL (logged at most once a
// second per limiter) and the connection goes on. A CallerLimiter given
// to WithCallerLimiter may be remote and is never consulted there: with
// one, the tap takes no permit and only rejects a call when its limiter
// has no free permit; the interceptors do the rest, caller quota first.
//
// grpc-go writes a tap's rejection as a bare status, so calls rejected
// there get RESOURCE_EXHAUSTED with the usual message but no
// grpc-retry-pushback-ms trailer, and the PushbackFunc is not called for
// them (rate-limit rejections keep their RetryInfo detail). It is a server
// option; a grpc.Server takes one tap handle, so do not install another.
func WithEarlyRejection() ServerOption {
	return serverOption(func(c *config) { c.early = true })
}

// Bounds of how long a permit the tap took waits for its interceptor.
// The floor leaves an honest request, which follows its headers in the
// same flight of packets, time to arrive when the method answers in
// microseconds; the ceiling caps what headers alone hold on slow methods.
const (
	minEarlyHold = 10 * time.Millisecond
	maxEarlyHold = time.Second
	// earlyHoldUnknown is the bound before a method's RTT is known.
	earlyHoldUnknown = 100 * time.Millisecond
)

// earlyHold is how long a permit the tap took for a call of g waits for
// the call's interceptor: overrun.Factor × the RTT g's calls take, within the
// bounds above. Longer, headers alone would hold a permit longer than a
// call of the method does.
func earlyHold(g *gate) time.Duration {
	rtt := g.rtt.Value()
	if rtt <= 0 {
		return earlyHoldUnknown
	}
	return min(max(overrun.Factor*rtt, minEarlyHold), maxEarlyHold)
}

// earlyKey is the context key of the permit a tap took.
type earlyKey struct{}

// States of an earlyPermit.
const (
	earlyHeld    int32 = iota // the tap's permit waits for the interceptor
	earlyExpired              // given back unclaimed; the charge stays
	earlyDone                 // claimed by the interceptor, or the stream ended
)

// An earlyPermit is a permit the tap took, waiting for the interceptor.
// Exactly one of the interceptor, the expiry and the stream's end returns
// it; whoever moves state from earlyHeld owns tok.
type earlyPermit struct {
	state     atomic.Int32
	r         *route
	tok       limiter.Token
	ch        charged     // the rates charged, which the call keeps
	stopTimer func() bool // stops the expiry
	stopEnd   func() bool // stops the release at the stream's end
}

// tap is the tap.ServerInHandle of WithEarlyRejection. It runs on the
// connection's reader, under grpc-go's lock of the connection: it must
// neither wait nor panic.
func (s *Server) tap(ctx context.Context, info *tap.Info) (_ context.Context, err error) {
	r := s.tab.Load().existing(info.FullMethodName)
	if r == nil || r.gate == nil || r.gate.queue || r.gate.dryRun.Load() {
		return ctx, nil
	}
	if cl := r.t.callers; cl != nil && cl.gcra == nil {
		// The caller quota is a WithCallerLimiter's, maybe a network
		// round trip away, and it must come before anything shared is
		// spent: leave the call to the interceptors, unless no permit is
		// free at all, in which case they would reject it anyway.
		return ctx, s.tapFull(ctx, r)
	}
	var ch charged
	var tok limiter.Token
	done := false
	defer func() {
		if done {
			return
		}
		// User code (the callerkey.Func, the priority trust function) panicked.
		v := recover()
		if tok.Held() {
			s.release(ctx, r, &tok, limiter.Ignored, false)
		}
		ch.refund()
		err = s.tapPanicked(ctx, r, v)
	}()
	if r.gate.bucket != nil || r.t.callers != nil {
		var rej *rejection
		if ch, rej = s.checkRates(ctx, r); rej != nil {
			done = true
			return ctx, rej.err
		}
	}
	tok, reason := s.tryAcquire(ctx, r, s.fairCaller(ctx, r))
	if reason != "" {
		ch.refund()
		st := r.gate.state()
		s.rejectedFor(ctx, r, reason)
		done = true
		// No PushbackFunc here: grpc-go would not send its answer.
		return ctx, s.limitError(r, st, reason)
	}
	p := &earlyPermit{r: r, tok: tok, ch: ch}
	tok = limiter.Token{} // p owns it now
	ctx = context.WithValue(ctx, earlyKey{}, p)
	// A caller that sends its headers and holds its request back must not
	// keep the permit: see WithEarlyRejection.
	p.stopTimer = s.afterFunc(earlyHold(r.gate), func() {
		if p.state.CompareAndSwap(earlyHeld, earlyExpired) {
			s.release(ctx, r, &p.tok, limiter.Ignored, false)
		}
	})
	// grpc-go cancels a stream's context when the stream ends, however it
	// ends: a permit no interceptor claimed is returned then.
	p.stopEnd = context.AfterFunc(ctx, func() {
		if p.state.CompareAndSwap(earlyHeld, earlyDone) {
			p.stopTimer()
			s.release(ctx, r, &p.tok, limiter.Ignored, false)
		}
	})
	done = true
	return ctx, nil
}

// tapFull rejects a call of r when its limiter has no permit free, and
// lets it on otherwise without taking one. It runs no user code.
func (s *Server) tapFull(ctx context.Context, r *route) error {
	st := r.gate.state()
	if st.Inflight < st.Limit {
		return nil
	}
	s.rejectedFor(ctx, r, reasonLimit)
	return s.limitError(r, st, reasonLimit)
}

// tapPanicked logs a panic of user code in the tap, at most once per
// dryLogEvery per limiter (a caller may be able to trigger it on every
// call), and returns the status of the call it fails. The panic value
// stays in the log: it is no business of the caller's.
func (s *Server) tapPanicked(ctx context.Context, r *route, v any) error {
	g := r.gate
	now := time.Now().UnixNano()
	if last := g.panicLog.Load(); now-last >= int64(dryLogEvery) && g.panicLog.CompareAndSwap(last, now) {
		l := r.t.logger
		if l == nil {
			l = slog.Default()
		}
		l.LogAttrs(ctx, slog.LevelError, "sluice: user code panicked in the tap of WithEarlyRejection; the call failed",
			slog.String("method", r.method), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
	}
	return status.Errorf(codes.Internal, "sluice: server failed /%s: internal error", r.method)
}

// admitEarly takes over the permit the tap took for this call, if it took
// one, and reports whether it did. The permit is given back and taken
// again, so that the clock of the call starts now, when its handler can
// start, rather than at the headers; one given back unclaimed (see
// earlyHold) is taken again the same way. The rates the tap charged stay
// charged, unless the call is rejected after all.
func (s *Server) admitEarly(ctx context.Context, r *route) (limiter.Token, *rejection, bool) {
	p, _ := ctx.Value(earlyKey{}).(*earlyPermit)
	if p == nil {
		return limiter.Token{}, nil, false
	}
	prev := p.state.Swap(earlyDone)
	if prev == earlyDone {
		return limiter.Token{}, nil, false
	}
	p.stopEnd()
	if prev == earlyHeld {
		p.stopTimer()
	}
	if p.r.gate != r.gate || r.gate.dryRun.Load() {
		// A Reload moved the method between tap and interceptor, or put
		// it in a dry run: give everything back and start over.
		if prev == earlyHeld {
			s.release(ctx, p.r, &p.tok, limiter.Ignored, false)
		}
		p.ch.refund()
		return limiter.Token{}, nil, false
	}
	if prev == earlyHeld {
		// Restarting the token's clock in place would need the limiter's
		// help; giving the permit back and taking one at once does it,
		// at the risk of losing the permit to a call in between.
		p.tok.ReleaseUntimed(limiter.Ignored)
	}
	tok, rej := s.acquire(ctx, r, r.gate.queue)
	if rej != nil {
		p.ch.refund()
	}
	return tok, rej, true
}

// tapOption returns the grpc.ServerOption that installs s's tap, or nil.
func (s *Server) tapOption() grpc.ServerOption {
	if !s.early {
		return nil
	}
	return grpc.InTapHandle(s.tap)
}
