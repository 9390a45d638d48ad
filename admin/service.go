package admin

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/interceptor"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// Limits is what the service needs from the interceptors:
// *interceptor.Server and *interceptor.Client provide it.
type Limits interface {
	Limiters() []interceptor.LimiterState
	SetOverride(name string, limit int, ttl time.Duration) error
	ClearOverride(name string) error
	SetDryRun(name string, on bool) error
}

// Watch intervals: the default, and the shortest a caller may ask for.
const (
	defaultWatchInterval = time.Second
	minWatchInterval     = 100 * time.Millisecond
)

// service implements sluicev1.LimitsServiceServer over a Limits.
type service struct {
	sluicev1.UnimplementedLimitsServiceServer
	limits        Limits
	auth          []Authorizer
	log           *slog.Logger
	maxWatches    int
	watchLifetime time.Duration
	watches       atomic.Int64 // open WatchLimits streams
	errs          []error      // from the options
	refusals      refusalLog
	now           func() time.Time // the refusal log's clock; nil: time.Now
}

// Register registers the admin service of limits on srv, the server that
// operators reach (a port of its own, a Unix socket), not the one that
// serves your clients. It refuses to register a service no one is allowed
// to use by name: give at least one of WithTLSClients,
// WithUnixSocketPeers or WithAuthorizer. No caller is trusted for its
// address alone.
func Register(srv grpc.ServiceRegistrar, limits Limits, opts ...Option) error {
	s, err := newService(limits, opts...)
	if err != nil {
		return err
	}
	sluicev1.RegisterLimitsServiceServer(srv, s)
	return nil
}

func newService(limits Limits, opts ...Option) (*service, error) {
	if limits == nil {
		return nil, errors.New("admin: Register needs the Limits to serve (an *interceptor.Server or *interceptor.Client)")
	}
	s := &service{limits: limits, maxWatches: defaultMaxWatches, watchLifetime: defaultWatchLifetime}
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	if len(s.errs) > 0 {
		return nil, errors.Join(s.errs...)
	}
	if len(s.auth) == 0 {
		return nil, errors.New(errNoAuthorizer)
	}
	return s, nil
}

func (s *service) logger() *slog.Logger {
	if s != nil && s.log != nil {
		return s.log
	}
	return slog.Default()
}

// authorize returns who the caller of method is, or the status error that
// refuses the call. Refusals are logged with attrs, what the call asked
// for.
func (s *service) authorize(ctx context.Context, method string, attrs ...slog.Attr) (string, error) {
	full := "/sluice.v1.LimitsService/" + method
	var caller string
	var err error
	if s == nil || s.limits == nil || len(s.auth) == 0 {
		err = status.Error(codes.PermissionDenied, errNoAuthorizer)
	} else {
		caller, err = s.admit(ctx, full)
	}
	if err == nil {
		if caller == "" {
			caller = "(unnamed)"
		}
		return caller, nil
	}
	log, suppressed := s.refusalLog().allow(s.clock())
	if !log {
		return "", err
	}
	attrs = append([]slog.Attr{slog.String("method", full), slog.String("peer", peerAddr(ctx))}, attrs...)
	attrs = append(attrs, slog.String("error", status.Convert(err).Message()))
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	s.logger().LogAttrs(ctx, slog.LevelWarn, "sluice admin: call refused", attrs...)
	return "", err
}

// Bounds of the log of refused calls (see WithLogger).
const (
	refusalLogBurst    = 10          // lines per interval
	refusalLogInterval = time.Second //
	maxLoggedName      = 128         // bytes of a limiter name
)

// nilRefusals throttles the refusals of a nil *service.
var nilRefusals refusalLog

func (s *service) refusalLog() *refusalLog {
	if s == nil {
		return &nilRefusals
	}
	return &s.refusals
}

func (s *service) clock() time.Time {
	if s != nil && s.now != nil {
		return s.now()
	}
	return time.Now()
}

// refusalLog throttles the log of refused calls to refusalLogBurst lines
// per refusalLogInterval: refusals come at the pace of whoever is refused.
type refusalLog struct {
	mu         sync.Mutex
	start      time.Time // of the current interval
	logged     int       // lines in the current interval
	suppressed int       // refusals left out since the last line
}

// allow reports whether a refusal at now is logged and, if so, how many
// were left out before it.
func (r *refusalLog) allow(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := now.Sub(r.start); d >= refusalLogInterval || d < 0 {
		r.start, r.logged = now, 0
	}
	if r.logged == refusalLogBurst {
		r.suppressed++
		return false, 0
	}
	r.logged++
	n := r.suppressed
	r.suppressed = 0
	return true, n
}

// nameAttrs are the log attributes of a limiter name a caller sent: the
// name as it is if it is plain text of at most maxLoggedName bytes, else
// quoted and cut, with its length if it was cut.
func nameAttrs(name string) []slog.Attr {
	plain := len(name) <= maxLoggedName && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return r == '"' || r == '\\' || !strconv.IsGraphic(r) })
	if plain {
		return []slog.Attr{slog.String("limiter", name)}
	}
	if len(name) <= maxLoggedName {
		return []slog.Attr{slog.String("limiter", strconv.Quote(name))}
	}
	i := maxLoggedName
	for i > 0 && !utf8.RuneStart(name[i]) {
		i--
	}
	return []slog.Attr{slog.String("limiter", strconv.Quote(name[:i])+"..."), slog.Int("limiter_bytes", len(name))}
}

// admit asks each Authorizer in turn; the first to admit the caller wins.
func (s *service) admit(ctx context.Context, full string) (string, error) {
	var errs []error
	for _, a := range s.auth {
		caller, err := a(ctx, full)
		if err == nil {
			return caller, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		if _, ok := status.FromError(errs[0]); ok {
			return "", errs[0]
		}
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = status.Convert(err).Message()
	}
	return "", status.Error(codes.PermissionDenied, strings.Join(msgs, "; "))
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// ListLimits implements sluicev1.LimitsServiceServer.
func (s *service) ListLimits(ctx context.Context, _ *sluicev1.ListLimitsRequest) (*sluicev1.ListLimitsResponse, error) {
	caller, err := s.authorize(ctx, "ListLimits")
	if err != nil {
		return nil, err
	}
	s.logger().LogAttrs(ctx, slog.LevelDebug, "sluice admin: limits listed", slog.String("caller", caller), slog.String("peer", peerAddr(ctx)))
	resp := &sluicev1.ListLimitsResponse{}
	now := time.Now()
	for _, l := range s.limits.Limiters() {
		resp.Limiters = append(resp.Limiters, toStatus(l, now))
	}
	return resp, nil
}

// WatchLimits implements sluicev1.LimitsServiceServer. It looks at the
// limiters once per interval and sends those whose figures changed, the
// admission and rejection counts included: at most one message per
// interval. At most WithMaxWatches streams are open at once, each for at
// most WithWatchLifetime, after which it ends with OK.
func (s *service) WatchLimits(req *sluicev1.WatchLimitsRequest, stream grpc.ServerStreamingServer[sluicev1.WatchLimitsResponse]) error {
	ctx := stream.Context()
	caller, err := s.authorize(ctx, "WatchLimits")
	if err != nil {
		return err
	}
	interval := defaultWatchInterval
	if req.GetInterval() != nil {
		if err := req.GetInterval().CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "interval: %v", err)
		}
		interval = max(req.GetInterval().AsDuration(), minWatchInterval)
	}
	if n := s.watches.Add(1); n > int64(s.maxWatches) {
		s.watches.Add(-1)
		s.logger().LogAttrs(ctx, slog.LevelWarn, "sluice admin: watch refused, too many open",
			slog.String("caller", caller), slog.String("peer", peerAddr(ctx)), slog.Int("max_watches", s.maxWatches))
		return status.Errorf(codes.ResourceExhausted,
			"admin: too many watch streams open (the most is %d, admin.WithMaxWatches); retry when one ends", s.maxWatches)
	}
	defer s.watches.Add(-1)
	s.logger().LogAttrs(ctx, slog.LevelDebug, "sluice admin: watch started", slog.String("caller", caller), slog.String("peer", peerAddr(ctx)))

	last := map[string]interceptor.LimiterState{}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.NewTimer(s.watchLifetime)
	defer end.Stop()
	for first := true; ; first = false {
		now := time.Now()
		var changed []*sluicev1.LimiterStatus
		for _, l := range s.limits.Limiters() {
			if prev, ok := last[l.Name]; first || !ok || !sameFigures(prev, l) {
				changed = append(changed, toStatus(l, now))
			}
			last[l.Name] = l
		}
		if first || len(changed) > 0 {
			if err := stream.Send(&sluicev1.WatchLimitsResponse{Limiters: changed}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-end.C:
			// The end of the stream's lifetime: OK, so the client
			// watches again if it still wants to.
			return nil
		case <-tick.C:
		}
	}
}

// sameFigures compares what a watcher sees, leaving out the RTT average,
// which moves with every call. The counts move with every call too, but a
// watcher needs them for its rates: a busy limiter is sent every
// interval, never more often, since the watch looks once per interval.
func sameFigures(a, b interceptor.LimiterState) bool {
	return a.Limit == b.Limit && a.Inflight == b.Inflight && a.Queued == b.Queued &&
		a.OverrideUntil.Equal(b.OverrideUntil) && a.DryRun == b.DryRun &&
		a.Admitted == b.Admitted && a.Rejected == b.Rejected
}

// SetOverride implements sluicev1.LimitsServiceServer. The name is the
// limiter's as ListLimits gives it, "pkg.Svc/Method", or the method's
// "/pkg.Svc/Method"; so for ClearOverride and SetDryRun. Every attempt is
// logged with the caller.
func (s *service) SetOverride(ctx context.Context, req *sluicev1.SetOverrideRequest) (*sluicev1.SetOverrideResponse, error) {
	attrs := append(nameAttrs(req.GetName()), slog.Int64("limit", int64(req.GetLimit())), slog.Duration("ttl", req.GetTtl().AsDuration()))
	caller, err := s.authorize(ctx, "SetOverride", attrs...)
	if err != nil {
		return nil, err
	}
	attrs = append([]slog.Attr{slog.String("caller", caller), slog.String("peer", peerAddr(ctx))}, attrs...)
	err = s.setOverride(req)
	if err != nil {
		s.logger().LogAttrs(ctx, slog.LevelWarn, "sluice admin: override failed", append(attrs, slog.String("error", status.Convert(err).Message()))...)
		return nil, hinted(err)
	}
	s.logger().LogAttrs(ctx, slog.LevelInfo, "sluice admin: limit overridden", attrs...)
	l, err := s.find(req.GetName())
	if err != nil {
		return nil, err
	}
	return &sluicev1.SetOverrideResponse{Limiter: l}, nil
}

func (s *service) setOverride(req *sluicev1.SetOverrideRequest) error {
	if req.GetTtl() == nil {
		return status.Error(codes.InvalidArgument, "ttl: required: how long the override holds")
	}
	if err := req.GetTtl().CheckValid(); err != nil {
		return status.Errorf(codes.InvalidArgument, "ttl: %v", err)
	}
	if err := s.limits.SetOverride(limiterName(req.GetName()), int(req.GetLimit()), req.GetTtl().AsDuration()); err != nil {
		return toStatusError(err)
	}
	return nil
}

// ClearOverride implements sluicev1.LimitsServiceServer. Every attempt is
// logged with the caller.
func (s *service) ClearOverride(ctx context.Context, req *sluicev1.ClearOverrideRequest) (*sluicev1.ClearOverrideResponse, error) {
	attrs := nameAttrs(req.GetName())
	caller, err := s.authorize(ctx, "ClearOverride", attrs...)
	if err != nil {
		return nil, err
	}
	attrs = append([]slog.Attr{slog.String("caller", caller), slog.String("peer", peerAddr(ctx))}, attrs...)
	if err := s.limits.ClearOverride(limiterName(req.GetName())); err != nil {
		err = toStatusError(err)
		s.logger().LogAttrs(ctx, slog.LevelWarn, "sluice admin: clear failed", append(attrs, slog.String("error", status.Convert(err).Message()))...)
		return nil, hinted(err)
	}
	s.logger().LogAttrs(ctx, slog.LevelInfo, "sluice admin: override cleared", attrs...)
	l, err := s.find(req.GetName())
	if err != nil {
		return nil, err
	}
	return &sluicev1.ClearOverrideResponse{Limiter: l}, nil
}

// SetDryRun implements sluicev1.LimitsServiceServer: it switches a
// limiter in or out of a dry run. Every attempt is logged with the caller.
func (s *service) SetDryRun(ctx context.Context, req *sluicev1.SetDryRunRequest) (*sluicev1.SetDryRunResponse, error) {
	attrs := append(nameAttrs(req.GetName()), slog.Bool("dry_run", req.GetDryRun()))
	caller, err := s.authorize(ctx, "SetDryRun", attrs...)
	if err != nil {
		return nil, err
	}
	attrs = append([]slog.Attr{slog.String("caller", caller), slog.String("peer", peerAddr(ctx))}, attrs...)
	if err := s.limits.SetDryRun(limiterName(req.GetName()), req.GetDryRun()); err != nil {
		err = toStatusError(err)
		s.logger().LogAttrs(ctx, slog.LevelWarn, "sluice admin: dry run switch failed", append(attrs, slog.String("error", status.Convert(err).Message()))...)
		return nil, hinted(err)
	}
	s.logger().LogAttrs(ctx, slog.LevelInfo, "sluice admin: dry run switched", attrs...)
	l, err := s.find(req.GetName())
	if err != nil {
		return nil, err
	}
	return &sluicev1.SetDryRunResponse{Limiter: l}, nil
}

// limiterName is the limiter a request names. Limiters are named as
// metrics name methods, "pkg.Svc/Method", and code as gRPC does,
// "/pkg.Svc/Method": both are accepted.
func limiterName(name string) string { return strings.TrimPrefix(name, "/") }

func (s *service) find(name string) (*sluicev1.LimiterStatus, error) {
	name = limiterName(name)
	now := time.Now()
	for _, l := range s.limits.Limiters() {
		if l.Name == name {
			return toStatus(l, now), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "admin: no limiter %q; %s", name, unknownHint)
}

// unknownHint is what a caller that named no live limiter is told.
const unknownHint = `ListLimits lists the live ones, named "package.Service/Method", ` +
	`"package.Service/" for a service entry or "_OTHER"; a method's limiter exists from its first call ` +
	`(or from the start if the server called interceptor.Server.CheckRegistered)`

// hinted adds to a NotFound what the caller should have named; the audit
// log keeps the short message.
func hinted(err error) error {
	if st := status.Convert(err); st.Code() == codes.NotFound {
		return status.Error(codes.NotFound, st.Message()+"; "+unknownHint)
	}
	return err
}

func toStatusError(err error) error {
	if errors.Is(err, interceptor.ErrUnknownLimiter) {
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

func toStatus(l interceptor.LimiterState, now time.Time) *sluicev1.LimiterStatus {
	st := &sluicev1.LimiterStatus{
		Name:     l.Name,
		Limit:    int32(l.Limit),
		Inflight: int32(l.Inflight),
		Queued:   int32(l.Queued),
		Rtt:      durationpb.New(l.RTT),
		DryRun:   l.DryRun,
		// Always set: unset tells a client the server counts nothing.
		AdmittedTotal: proto.Uint64(l.Admitted),
		RejectedTotal: proto.Uint64(l.Rejected),
	}
	if !l.OverrideUntil.IsZero() {
		st.OverrideRemaining = durationpb.New(max(l.OverrideUntil.Sub(now), 0))
	}
	return st
}

var _ sluicev1.LimitsServiceServer = (*service)(nil)
