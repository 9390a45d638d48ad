package interceptor

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

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
// The tap runs on the connection's reader, which must not wait, so it
// never queues: a call of a Limit with a Queue, and the first call of each
// method (whose limiter does not exist yet), are left to the interceptors
// as without this option. grpc-go writes a tap's rejection as a bare
// status, so calls rejected there get RESOURCE_EXHAUSTED with the usual
// message but no grpc-retry-pushback-ms trailer (rate-limit rejections keep
// their RetryInfo detail). It is a server option; a grpc.Server takes one
// tap handle, so do not install another.
func WithEarlyRejection() Option {
	return func(c *config) { c.early = true }
}

// earlyKey is the context key of the permit a tap took.
type earlyKey struct{}

// An earlyPermit is a permit the tap took, waiting for the interceptor.
// Exactly one of the interceptor and the stream's end claims it.
type earlyPermit struct {
	claimed atomic.Bool
	r       *route
	tok     limiter.Token
	ch      charged
	arrived time.Time
	stop    func() bool // stops the release at the stream's end
}

// tap is the tap.ServerInHandle of WithEarlyRejection.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	r := s.tab.Load().existing(info.FullMethodName)
	if r == nil || r.gate == nil || r.gate.queue || r.gate.dryRun.Load() {
		return ctx, nil
	}
	tok, ch, rej := s.take(ctx, r, false)
	if rej != nil {
		return ctx, rej.err
	}
	// Taken without waiting: the grant is the call's arrival.
	p := &earlyPermit{r: r, tok: tok, ch: ch, arrived: tok.Granted()}
	ctx = context.WithValue(ctx, earlyKey{}, p)
	// grpc-go cancels a stream's context when the stream ends, however it
	// ends: a permit no interceptor claimed is returned then.
	p.stop = context.AfterFunc(ctx, func() {
		if p.claimed.CompareAndSwap(false, true) {
			s.release(ctx, r, &p.tok, limiter.Ignored, false)
		}
	})
	return ctx, nil
}

// claimEarly returns the permit the tap took for this call, if any; the
// caller then owns it.
func claimEarly(ctx context.Context) *earlyPermit {
	p, _ := ctx.Value(earlyKey{}).(*earlyPermit)
	if p == nil || !p.claimed.CompareAndSwap(false, true) {
		return nil
	}
	p.stop()
	return p
}

// tapOption returns the grpc.ServerOption that installs s's tap, or nil.
func (s *Server) tapOption() grpc.ServerOption {
	if !s.early {
		return nil
	}
	return grpc.InTapHandle(s.tap)
}
