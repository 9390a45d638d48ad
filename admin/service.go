package admin

import (
	"context"
	"errors"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
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
}

// Watch intervals: the default, and the shortest a caller may ask for.
const (
	DefaultWatchInterval = time.Second
	MinWatchInterval     = 100 * time.Millisecond
)

// Service implements sluicev1.LimitsServiceServer over a Limits.
type Service struct {
	sluicev1.UnimplementedLimitsServiceServer
	limits Limits
	auth   Authorizer
}

// NewService returns the admin service of limits.
func NewService(limits Limits, opts ...Option) (*Service, error) {
	if limits == nil {
		return nil, errors.New("admin: NewService needs the Limits to serve (an *interceptor.Server or *interceptor.Client)")
	}
	s := &Service{limits: limits, auth: LoopbackOnly}
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	if s.auth == nil {
		return nil, errors.New("admin: WithAuthorizer(nil): an Authorizer is required; omit the option for LoopbackOnly")
	}
	return s, nil
}

// LoopbackOnly is the default Authorizer: it serves callers connected from
// a loopback address (or a Unix socket) and refuses everyone else.
func LoopbackOnly(ctx context.Context, _ string) error {
	p, ok := peer.FromContext(ctx)
	if ok && p.Addr != nil {
		switch a := p.Addr.(type) {
		case *net.UnixAddr:
			return nil
		case *net.TCPAddr:
			if a.IP.IsLoopback() {
				return nil
			}
		}
	}
	return status.Error(codes.PermissionDenied, "admin: only loopback callers may use the limits service; configure admin.WithAuthorizer")
}

func (s *Service) authorize(ctx context.Context, method string) error {
	err := s.auth(ctx, "/sluice.v1.LimitsService/"+method)
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

// ListLimits implements sluicev1.LimitsServiceServer.
func (s *Service) ListLimits(ctx context.Context, _ *sluicev1.ListLimitsRequest) (*sluicev1.ListLimitsResponse, error) {
	if err := s.authorize(ctx, "ListLimits"); err != nil {
		return nil, err
	}
	resp := &sluicev1.ListLimitsResponse{}
	now := time.Now()
	for _, l := range s.limits.Limiters() {
		resp.Limiters = append(resp.Limiters, toStatus(l, now))
	}
	return resp, nil
}

// WatchLimits implements sluicev1.LimitsServiceServer.
func (s *Service) WatchLimits(req *sluicev1.WatchLimitsRequest, stream grpc.ServerStreamingServer[sluicev1.WatchLimitsResponse]) error {
	ctx := stream.Context()
	if err := s.authorize(ctx, "WatchLimits"); err != nil {
		return err
	}
	interval := DefaultWatchInterval
	if req.GetInterval() != nil {
		if err := req.GetInterval().CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "interval: %v", err)
		}
		interval = max(req.GetInterval().AsDuration(), MinWatchInterval)
	}
	last := map[string]interceptor.LimiterState{}
	tick := time.NewTicker(interval)
	defer tick.Stop()
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
		case <-tick.C:
		}
	}
}

// sameFigures compares what a watcher sees, leaving out the RTT average,
// which moves with every call.
func sameFigures(a, b interceptor.LimiterState) bool {
	return a.Limit == b.Limit && a.Inflight == b.Inflight && a.Queued == b.Queued && a.OverrideUntil.Equal(b.OverrideUntil)
}

// SetOverride implements sluicev1.LimitsServiceServer.
func (s *Service) SetOverride(ctx context.Context, req *sluicev1.SetOverrideRequest) (*sluicev1.SetOverrideResponse, error) {
	if err := s.authorize(ctx, "SetOverride"); err != nil {
		return nil, err
	}
	if req.GetTtl() == nil {
		return nil, status.Error(codes.InvalidArgument, "ttl: required: how long the override holds")
	}
	if err := req.GetTtl().CheckValid(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ttl: %v", err)
	}
	if err := s.limits.SetOverride(req.GetName(), int(req.GetLimit()), req.GetTtl().AsDuration()); err != nil {
		return nil, toStatusError(err)
	}
	l, err := s.find(req.GetName())
	if err != nil {
		return nil, err
	}
	return &sluicev1.SetOverrideResponse{Limiter: l}, nil
}

// ClearOverride implements sluicev1.LimitsServiceServer.
func (s *Service) ClearOverride(ctx context.Context, req *sluicev1.ClearOverrideRequest) (*sluicev1.ClearOverrideResponse, error) {
	if err := s.authorize(ctx, "ClearOverride"); err != nil {
		return nil, err
	}
	if err := s.limits.ClearOverride(req.GetName()); err != nil {
		return nil, toStatusError(err)
	}
	l, err := s.find(req.GetName())
	if err != nil {
		return nil, err
	}
	return &sluicev1.ClearOverrideResponse{Limiter: l}, nil
}

func (s *Service) find(name string) (*sluicev1.LimiterStatus, error) {
	now := time.Now()
	for _, l := range s.limits.Limiters() {
		if l.Name == name {
			return toStatus(l, now), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "admin: no limiter %q", name)
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
	}
	if !l.OverrideUntil.IsZero() {
		st.OverrideRemaining = durationpb.New(max(l.OverrideUntil.Sub(now), 0))
	}
	return st
}

var _ sluicev1.LimitsServiceServer = (*Service)(nil)
