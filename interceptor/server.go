package interceptor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/limiter"
)

// A Server holds the limiters of a gRPC server and gives out its
// interceptors. Each method (or configured service) gets an adaptive
// limiter; a call takes a permit before its handler runs and returns it
// when the handler returns, on every path, panics included. Calls over the
// limit fail with RESOURCE_EXHAUSTED and a grpc-retry-pushback-ms trailer.
//
// Calls of methods the grpc.Server has not registered (those a
// grpc.UnknownServiceHandler serves) are recorded with rpc.method and
// sluice.limiter "_OTHER" and share one limiter of the default Limit, so
// that callers cannot choose the metrics' cardinality or mint limiters;
// configured entries still apply to them (see WithMethod).
//
// A limit learns only from the server's own work. A stream whose handler
// returns the error its RecvMsg or SendMsg got (or one of the same code)
// ends without a signal: grpc-go produced it from the caller's bytes (a
// message over grpc.MaxRecvMsgSize, or over it once decompressed, one that
// fails to decompress or decode, an answer the request made larger than
// grpc.MaxSendMsgSize) or from the caller's leaving, and a message over
// the limit would otherwise be RESOURCE_EXHAUSTED, a drop. A unary request
// that grpc-go cannot read never reaches the interceptors; a permit
// WithEarlyRejection's tap took for it is given back unused.
//
// A Server is safe for concurrent use. Install both interceptors on one
// grpc.Server with ServerOptions.
type Server struct {
	*core
	load *loadReporter // nil without WithLoadReports

	warnMu sync.Mutex
	warned map[string]bool // configured names warned of (see warnUnchecked)
}

// NewServer returns a Server configured by opts. Invalid options (a
// malformed method name, a limit out of range) are reported together in
// the error.
func NewServer(opts ...ServerOption) (*Server, error) {
	fs := applies(opts, ServerOption.applyServer)
	c, err := newCore("server", fs)
	if err != nil {
		return nil, err
	}
	s := &Server{core: c}
	if newConfig(fs).loadReports {
		s.load = newLoadReporter(c)
	}
	return s, nil
}

// Reload applies new options without a restart and without dropping a
// call. They are layered over the options the Server was built
// with, not put in their place: what opts set wins (a WithMethod entry
// replaces the built-with entry of the same name, WithDefault the
// default, WithCallerLimiter the quota), and what opts do not mention
// stays as built. A config file that knows nothing of a per-caller quota
// set in code thus cannot drop it. To remove a built-with setting,
// override it (WithExempt, a WithMethod with the Limit wanted). Each
// Reload starts again from the built-with options: options of an earlier
// Reload do not carry over. Built-with options that came from a config
// file (package config) are left out of that base:
// the new file's options replace them whole. Everything is validated first: on an error
// nothing changes. Limiters whose Limit is unchanged (same method
// or service name, equal Limit; see Limit.Algorithm) keep their live limit
// and state; the others are rebuilt, and calls admitted before the reload
// return their permits to the limiter that gave them. A caller rate limit
// with the same RateLimit keeps its callers' state. WithMeterProvider
// cannot change: it is ignored here.
func (s *Server) Reload(opts ...ServerOption) error {
	return s.reload(applies(opts, ServerOption.applyServer))
}

// ServerOptions returns the options that install s's interceptors (and
// its tap handle, with WithEarlyRejection) for grpc.NewServer:
//
//	limits, err := interceptor.NewServer()
//	...
//	srv := grpc.NewServer(limits.ServerOptions()...)
//
// Put sluice before interceptors that do real work (auth, logging may go
// first) so rejected calls cost little, and after a recovery interceptor
// so a handler's panic passes through sluice, which releases the permit.
func (s *Server) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamServerInterceptor()),
	}
	if tap := s.tapOption(); tap != nil {
		opts = append(opts, tap)
	}
	if s.load != nil {
		opts = s.withLoadReports(opts)
	}
	return opts
}

// UnaryServerInterceptor returns the interceptor that limits unary calls.
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	if s.load != nil {
		return s.load.unary(s.unary)
	}
	return s.unary
}

// StreamServerInterceptor returns the interceptor that limits streams. A
// stream holds its permit until its handler returns.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	if s.load != nil {
		return s.load.stream(s.stream)
	}
	return s.stream
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	t := s.tab.Load()
	if !t.checked.Load() {
		s.warnUnchecked(ctx, t, info.FullMethod, true)
	}
	r := t.lookup(info.FullMethod)
	if r.gate == nil {
		return handler(ctx, req)
	}
	tok, arrived, rej := s.admitServer(ctx, r)
	if rej != nil {
		if rej.pushback != NoPushback {
			// The call fails either way; a trailer that cannot be set
			// (the transport is gone) changes nothing for the caller.
			_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, formatPushback(rej.pushback)))
		}
		return nil, rej.err
	}
	done := false
	defer func() {
		if !done { // the handler panicked: release, let the panic go on
			s.release(ctx, r, &tok, limiter.Ignored, false)
		}
	}()
	resp, err = handler(ctx, req)
	done = true
	s.finishServer(ctx, r, &tok, arrived, Result{FullMethod: info.FullMethod, Err: err})
	return resp, err
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	t := s.tab.Load()
	if !t.checked.Load() {
		s.warnUnchecked(ss.Context(), t, info.FullMethod, srv != nil)
	}
	var r *route
	if srv == nil {
		// grpc-go passes no service implementation for the calls it hands
		// to grpc.UnknownServiceHandler: the method is not registered and
		// its name is the caller's choice.
		r = t.lookupOther(info.FullMethod)
	} else {
		r = t.lookup(info.FullMethod)
	}
	if r.gate == nil {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	tok, arrived, rej := s.admitServer(ctx, r)
	if rej != nil {
		if rej.pushback != NoPushback {
			ss.SetTrailer(metadata.Pairs(pushbackKey, formatPushback(rej.pushback)))
		}
		return rej.err
	}
	done := false
	defer func() {
		if !done {
			s.release(ctx, r, &tok, limiter.Ignored, false)
		}
	}()
	ws := &watchedStream{ServerStream: ss}
	err := handler(srv, ws)
	done = true
	if ws.failedWith(err) {
		// The caller's bytes or its leaving ended the stream, not the
		// server's work: no signal, whatever the Classifier would say.
		s.release(ctx, r, &tok, limiter.Ignored, false)
		return err
	}
	s.finishServer(ctx, r, &tok, arrived, Result{FullMethod: info.FullMethod, Err: err, Stream: true})
	return err
}

// watchedStream is the grpc.ServerStream the handler of a limited stream
// gets. It remembers how RecvMsg and SendMsg failed: grpc-go's errors
// there come from the caller's bytes (a message over the size limit, one
// that fails to decompress or to decode, an answer made too large by what
// the caller asked for) or from the caller's leaving, never from the
// server's load, yet a message over the limit is RESOURCE_EXHAUSTED.
type watchedStream struct {
	grpc.ServerStream
	// recv and send are 1 + the code of RecvMsg's and SendMsg's last
	// failure, 0 for none. A SendMsg that succeeds clears send: the
	// handler went on after the failure, so it is not what ended the
	// stream.
	recv, send atomic.Uint32
}

func (w *watchedStream) RecvMsg(m any) error {
	err := w.ServerStream.RecvMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		w.recv.Store(uint32(code(err)) + 1)
	}
	return err
}

func (w *watchedStream) SendMsg(m any) error {
	err := w.ServerStream.SendMsg(m)
	switch {
	case err != nil:
		w.send.Store(uint32(code(err)) + 1)
	case w.send.Load() != 0:
		w.send.Store(0)
	}
	return err
}

// failedWith reports whether err, what the handler returned, passes on a
// failure of RecvMsg or SendMsg: the error itself, wrapped, or remade
// with a message of the handler's, as long as the code is the same. (A
// handler that turns such a failure into another code of overload is
// believed.)
func (w *watchedStream) failedWith(err error) bool {
	if err == nil {
		return false
	}
	c := uint32(code(err)) + 1
	return c == w.recv.Load() || c == w.send.Load()
}

// admitServer takes the permit of a call: the one WithEarlyRejection's tap
// took, or a new one. It returns when the call arrived.
func (s *Server) admitServer(ctx context.Context, r *route) (limiter.Token, time.Time, *rejection) {
	if s.early {
		if tok, rej, ok := s.admitEarly(ctx, r); ok {
			return tok, tok.Granted(), rej
		}
	}
	// A call that may wait in the queue arrives before its grant. Any
	// other is granted as it arrives, and the grant's clock reading is
	// its arrival: the clock is read twice per call, at the grant and at
	// the release, the two readings its RTT needs.
	var arrived time.Time
	if r.gate.queue {
		arrived = time.Now()
	}
	tok, rej := s.admit(ctx, r)
	if rej == nil && arrived.IsZero() {
		if arrived = tok.Granted(); arrived.IsZero() {
			arrived = time.Now() // a dry run let the call through without a permit
		}
	}
	return tok, arrived, rej
}

// finishServer releases a server call's permit. A call that ended after its
// deadline is overload only when the server's own time made it late: the
// time since it arrived (queue and handler) exceeded overrun.Factor × the
// RTT the limiter has seen its OK calls take. Otherwise the caller chose a
// deadline too short for the work, or already expired, and the call is
// Ignored without consulting the Classifier: a caller must not be able to
// lower the limit that every caller shares. Before any call has answered
// OK there is nothing to judge by, and an overrun counts: a fresh server
// whose downstream is stuck, or which admitted more than it can serve,
// must hear it. Streams live as long as their clients want, so their
// deadlines are never the server's doing.
func (s *Server) finishServer(ctx context.Context, r *route, tok *limiter.Token, arrived time.Time, res Result) {
	if late(ctx) {
		if res.Stream || r.gate.rtt.CallersFault(time.Since(arrived)) {
			s.release(ctx, r, tok, limiter.Ignored, !res.Stream)
			return
		}
		res.Late = true
	}
	s.finish(ctx, r, tok, res)
}

// CheckRegistered reports the methods and services configured with
// WithMethod or WithExempt that srv does not serve, typically a typo that
// would otherwise leave a method on the default limit. Call it after
// registering every service (srv is typically the *grpc.Server):
//
//	if err := limits.CheckRegistered(srv); err != nil { ... }
//
// NewServer already refuses names that the linked protobuf definitions
// rule out; CheckRegistered also catches a service that is linked but not
// registered, or has no protobuf definition. Once it has run, the Server
// does not log the warning of WithMethod at its first call.
//
// It also creates the limiter of every method srv serves that is not
// exempt (and Reload creates them again), so that Limiters, the admin
// service and the metrics show them from the start rather than from each
// method's first call.
func (s *Server) CheckRegistered(srv interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}) error {
	info := srv.GetServiceInfo()
	var served []string
	for service, si := range info {
		for _, m := range si.Methods {
			served = append(served, "/"+service+"/"+m.Name)
		}
	}
	sort.Strings(served)
	s.served.Store(&served)
	t := s.tab.Load()
	t.prepare(&served)
	// Checked here, exactly: no warning at the first call, nor of these
	// names after a Reload.
	t.checked.Store(true)
	s.warnMu.Lock()
	for _, name := range t.unchecked {
		if s.warned == nil {
			s.warned = map[string]bool{}
		}
		s.warned[name] = true
	}
	s.warnMu.Unlock()
	var unknown []string
	for name := range t.methods {
		service, method, _ := strings.Cut(name[1:], "/")
		if !serves(info, service, method) {
			unknown = append(unknown, name)
		}
	}
	for service, e := range t.services {
		if _, ok := info[service]; !ok && !isDefaultExempt(e.name) {
			unknown = append(unknown, e.name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fmt.Errorf("interceptor: configured but not served by this server: %s", strings.Join(unknown, ", "))
}

func serves(info map[string]grpc.ServiceInfo, service, method string) bool {
	si, ok := info[service]
	if !ok {
		return false
	}
	for _, m := range si.Methods {
		if m.Name == method {
			return true
		}
	}
	return false
}

func isDefaultExempt(name string) bool {
	for _, n := range DefaultExempt {
		if n == name {
			return true
		}
	}
	return false
}
