package interceptor

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/limiter"
)

// A Client holds the limiters of a gRPC client and gives out its
// interceptors. A call takes a permit before it is sent and returns it when
// it ends, so a client stops sending more than its servers can answer:
// RESOURCE_EXHAUSTED answers and deadline overruns lower the limit, and a
// call over the limit fails at once with RESOURCE_EXHAUSTED, without
// reaching the network.
//
// When a server rejects a call with a grpc-retry-pushback-ms trailer, the
// Client honours it by keeping that call's permit for the pushback
// (bounded by WithMaxPushback): each rejection takes one slot out of use
// for as long as the server asked, so a client backs off in proportion to
// how often it is pushed back, while calls to servers with room go on. A
// negative pushback ("do not retry", gRFC A6) holds the permit for the
// whole WithMaxPushback: the server wants no more of this work. Without a
// trailer, or with a malformed one, or one of 0, the permit comes back at
// once and the call's failure lowers the limit as usual.
//
// A stream's permit is returned exactly once however the stream ends:
// RecvMsg returning io.EOF or an error, the context being cancelled or
// expiring, or the stream failing to start.
//
// Calls that no generated stub made (cc.Invoke or cc.NewStream without
// the grpc.StaticMethod() call option that generated code passes) are
// recorded with rpc.method and sluice.limiter "_OTHER" and share one
// limiter of the default Limit, as semantic conventions ask for methods
// the instrumentation does not know; configured entries still apply to
// them (see WithMethod).
//
// A Client is safe for concurrent use. Install both interceptors on one
// grpc.ClientConn with DialOptions.
type Client struct {
	*core
}

// NewClient returns a Client configured by opts.
func NewClient(opts ...ClientOption) (*Client, error) {
	c, err := newCore("client", applies(opts, ClientOption.applyClient))
	if err != nil {
		return nil, err
	}
	return &Client{core: c}, nil
}

// Reload applies new options to c without a restart and without dropping
// a call, layered over the options c was built with, as Server.Reload does.
func (c *Client) Reload(opts ...ClientOption) error {
	return c.reload(applies(opts, ClientOption.applyClient))
}

// DialOptions returns the options that install c's interceptors for
// grpc.NewClient:
//
//	client, err := interceptor.NewClient()
//	...
//	conn, err := grpc.NewClient(target, append(client.DialOptions(), creds)...)
func (c *Client) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()),
	}
}

// UnaryClientInterceptor returns the interceptor that limits unary calls.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return c.unary
}

// StreamClientInterceptor returns the interceptor that limits streams.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return c.stream
}

// route resolves a call's method. Generated stubs mark their calls with
// grpc.StaticMethod(); any other method name (cc.Invoke or cc.NewStream
// with a name from elsewhere) is unknown, see table.lookupOther.
func (c *Client) route(method string, opts []grpc.CallOption) *route {
	t := c.tab.Load()
	for _, o := range opts {
		if _, ok := o.(grpc.StaticMethodCallOption); ok {
			return t.lookup(method)
		}
	}
	return t.lookupOther(method)
}

// unaryCall holds what a unary call needs beyond its arguments in one
// allocation: the trailer and the extended call options.
type unaryCall struct {
	trailer metadata.MD
	opts    [4]grpc.CallOption
}

func (c *Client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r := c.route(method, opts)
	if r.gate == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	tok, rej := c.admit(ctx, r)
	if rej != nil {
		return rej.err
	}
	done := false
	defer func() {
		if !done { // a later interceptor panicked
			c.release(ctx, r, &tok, limiter.Ignored, false)
		}
	}()
	var trailer *metadata.MD
	if r.t.maxHold > 0 {
		call := &unaryCall{}
		opts = append(append(call.opts[:0], opts...), grpc.Trailer(&call.trailer))
		trailer = &call.trailer
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	done = true
	c.end(ctx, r, &tok, Result{FullMethod: method, Err: err, Late: late(ctx)}, trailer)
	return err
}

// end releases a finished call's permit, unless the server pushed back:
// then the permit is kept for the pushback.
func (c *Client) end(ctx context.Context, r *route, tok *limiter.Token, res Result, trailer *metadata.MD) {
	o := c.classify(ctx, r, tok, res)
	if o == limiter.Dropped && r.t.maxHold > 0 && trailer != nil && code(res.Err) == codes.ResourceExhausted {
		if d, ok := pushbackOf(*trailer); ok && d != 0 {
			if d < 0 { // "do not retry": back off as far as we may
				d = r.t.maxHold
			}
			c.admitted(ctx, r, o)
			held := *tok
			*tok = limiter.Token{}
			c.afterFunc(min(d, r.t.maxHold), func() {
				held.ReleaseUntimed(limiter.Dropped)
				if h := testhook.For(c.core); h != nil && h.Released != nil {
					h.Released()
				}
			})
			return
		}
	}
	c.settle(ctx, r, tok, o, res)
}

// pushbackOf reads the server's pushback from a trailer. Only a single
// well-formed value counts (see parsePushback).
func pushbackOf(md metadata.MD) (time.Duration, bool) {
	v := md.Get(pushbackKey)
	if len(v) != 1 {
		return 0, false
	}
	return parsePushback(v[0])
}

// streamCall follows one client stream to its end.
type streamCall struct {
	c       *Client
	ctx     context.Context
	r       *route
	method  string
	tok     limiter.Token
	trailer metadata.MD
	ended   atomic.Bool
}

func (c *Client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	r := c.route(method, opts)
	if r.gate == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	tok, rej := c.admit(ctx, r)
	if rej != nil {
		return nil, rej.err
	}
	call := &streamCall{c: c, ctx: ctx, r: r, method: method, tok: tok}
	defer func() {
		if r := recover(); r != nil {
			call.abort()
			panic(r)
		}
	}()
	// gRPC calls OnFinish exactly once when the stream ends, however it
	// ends (also when it fails to start), after the trailer is in place.
	opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&call.trailer), grpc.OnFinish(call.end))
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		call.end(err) // in case a later interceptor failed before gRPC saw the call
		return nil, err
	}
	return cs, nil
}

// abort releases the permit of a stream whose start panicked.
func (s *streamCall) abort() {
	if s.ended.CompareAndSwap(false, true) {
		s.c.release(s.ctx, s.r, &s.tok, limiter.Ignored, false)
	}
}

// end releases the stream's permit once, with the outcome err shows.
func (s *streamCall) end(err error) {
	if !s.ended.CompareAndSwap(false, true) {
		return
	}
	s.c.end(s.ctx, s.r, &s.tok, Result{FullMethod: s.method, Err: err, Late: late(s.ctx), Stream: true}, &s.trailer)
}
