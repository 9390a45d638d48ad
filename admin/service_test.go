package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

const unaryLimiter = "sluice.test.v1.TestService/Unary"

// start serves the test service, protected by sluice, and the admin
// service on one server, and makes one call so a limiter exists.
func start(t *testing.T, opts ...Option) sluicev1.LimitsServiceClient {
	t.Helper()
	c, _ := startWithCalls(t, opts...)
	return c
}

// startWithCalls is start that also returns a client of the test service,
// to make calls the limiter counts.
func startWithCalls(t *testing.T, opts ...Option) (sluicev1.LimitsServiceClient, testpb.TestServiceClient) {
	t.Helper()
	limits, err := interceptor.NewServer(interceptor.WithDefault(interceptor.Limit{Algorithm: limiter.FixedConfig{Limit: 5}}))
	require.NoError(t, err)
	svc, err := newService(limits, opts...)
	require.NoError(t, err)
	gs := grpc.NewServer(limits.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, &testpb.Service{})
	sluicev1.RegisterLimitsServiceServer(gs, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, conn.Close())
		gs.Stop()
		wg.Wait()
		assert.NoError(t, limits.Close())
	})
	calls := testpb.NewTestServiceClient(conn)
	_, err = calls.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	return sluicev1.NewLimitsServiceClient(conn), calls
}

// operator admits every caller as "test-operator".
func operator(context.Context, string) (string, error) { return "test-operator", nil }

func TestListLimits(t *testing.T) {
	c := start(t, WithAuthorizer(operator))
	resp, err := c.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetLimiters(), 1, "the admin service itself is never limited")
	l := resp.GetLimiters()[0]
	assert.Equal(t, unaryLimiter, l.GetName())
	assert.Equal(t, int32(5), l.GetLimit())
	assert.Zero(t, l.GetInflight())
	assert.Positive(t, l.GetRtt().AsDuration())
	assert.Nil(t, l.GetOverrideRemaining())
	require.NotNil(t, l.AdmittedTotal, "set even when 0: unset means a server that does not count")
	require.NotNil(t, l.RejectedTotal)
	assert.Equal(t, uint64(1), l.GetAdmittedTotal(), "the call start made")
	assert.Zero(t, l.GetRejectedTotal())
}

// The watch sends a limiter again when its counts move, and when it
// switches in or out of a dry run.
func TestWatchCounts(t *testing.T) {
	c, calls := startWithCalls(t, WithAuthorizer(operator))
	// A bound far beyond what the test needs, should a change never come.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	watch, err := c.WatchLimits(ctx, &sluicev1.WatchLimitsRequest{Interval: durationpb.New(time.Millisecond)})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Len(t, first.GetLimiters(), 1)
	assert.Equal(t, uint64(1), first.GetLimiters()[0].GetAdmittedTotal())

	// next receives until a message shows the limiter with ok true.
	next := func(what string, ok func(*sluicev1.LimiterStatus) bool) *sluicev1.LimiterStatus {
		t.Helper()
		for {
			m, err := watch.Recv()
			require.NoError(t, err, "waiting for %s", what)
			require.Len(t, m.GetLimiters(), 1)
			if l := m.GetLimiters()[0]; ok(l) {
				return l
			}
		}
	}
	_, err = calls.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	l := next("the second call", func(l *sluicev1.LimiterStatus) bool { return l.GetAdmittedTotal() == 2 })
	assert.Zero(t, l.GetRejectedTotal())

	_, err = c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 0, Ttl: durationpb.New(time.Hour)})
	require.NoError(t, err)
	_, err = calls.Unary(t.Context(), &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	l = next("the rejection", func(l *sluicev1.LimiterStatus) bool { return l.GetRejectedTotal() == 1 })
	assert.Equal(t, uint64(2), l.GetAdmittedTotal())

	_, err = c.SetDryRun(t.Context(), &sluicev1.SetDryRunRequest{Name: unaryLimiter, DryRun: true})
	require.NoError(t, err)
	next("the dry run", func(l *sluicev1.LimiterStatus) bool { return l.GetDryRun() })
}

func TestWatchAndOverride(t *testing.T) {
	c := start(t, WithAuthorizer(operator))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watch, err := c.WatchLimits(ctx, &sluicev1.WatchLimitsRequest{Interval: durationpb.New(time.Millisecond)})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Len(t, first.GetLimiters(), 1)
	assert.Equal(t, int32(5), first.GetLimiters()[0].GetLimit())

	set, err := c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 2, Ttl: durationpb.New(time.Hour)})
	require.NoError(t, err)
	assert.Equal(t, int32(2), set.GetLimiter().GetLimit())
	assert.InDelta(t, time.Hour.Seconds(), set.GetLimiter().GetOverrideRemaining().AsDuration().Seconds(), 60)

	changed, err := watch.Recv()
	require.NoError(t, err, "the watch reports the override")
	require.Len(t, changed.GetLimiters(), 1)
	assert.Equal(t, int32(2), changed.GetLimiters()[0].GetLimit())

	cleared, err := c.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: unaryLimiter})
	require.NoError(t, err)
	assert.Equal(t, int32(5), cleared.GetLimiter().GetLimit())
	assert.Nil(t, cleared.GetLimiter().GetOverrideRemaining())
	changed, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, int32(5), changed.GetLimiters()[0].GetLimit())
}

func TestSetDryRun(t *testing.T) {
	c := start(t, WithAuthorizer(operator))
	on, err := c.SetDryRun(t.Context(), &sluicev1.SetDryRunRequest{Name: unaryLimiter, DryRun: true})
	require.NoError(t, err)
	assert.True(t, on.GetLimiter().GetDryRun())
	list, err := c.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	require.NoError(t, err)
	assert.True(t, list.GetLimiters()[0].GetDryRun())
	off, err := c.SetDryRun(t.Context(), &sluicev1.SetDryRunRequest{Name: unaryLimiter})
	require.NoError(t, err)
	assert.False(t, off.GetLimiter().GetDryRun())
	_, err = c.SetDryRun(t.Context(), &sluicev1.SetDryRunRequest{Name: "x", DryRun: true})
	assert.Equal(t, codes.NotFound, status.Code(err))
}

func TestBadRequests(t *testing.T) {
	c := start(t, WithAuthorizer(operator))
	tests := []struct {
		name string
		req  *sluicev1.SetOverrideRequest
		code codes.Code
		msg  string
	}{
		{"no ttl", &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 1}, codes.InvalidArgument,
			"ttl: required: how long the override holds"},
		{"unknown limiter", &sluicev1.SetOverrideRequest{Name: "x", Limit: 1, Ttl: durationpb.New(time.Minute)}, codes.NotFound,
			`interceptor: no limiter of that name: "x"; ` + unknownHint},
		{"negative limit", &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: -3, Ttl: durationpb.New(time.Minute)}, codes.InvalidArgument,
			`interceptor: override of "sluice.test.v1.TestService/Unary": limiter: pinned limit is -3, must be in [0, 1048576]`},
		{"ttl too long", &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 1, Ttl: durationpb.New(48 * time.Hour)}, codes.InvalidArgument,
			"interceptor: override ttl is 48h0m0s, must be in (0, 24h0m0s]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.SetOverride(t.Context(), tt.req)
			assert.Equal(t, tt.code, status.Code(err))
			assert.Equal(t, tt.msg, status.Convert(err).Message())
		})
	}
	_, err := c.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: "x"})
	assert.Equal(t, codes.NotFound, status.Code(err))
}

func TestAuthorizer(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	deny := func(_ context.Context, method string) (string, error) {
		mu.Lock()
		seen = append(seen, method)
		mu.Unlock()
		if method == "/sluice.v1.LimitsService/ListLimits" {
			return "reader", nil
		}
		return "", errors.New("not an operator")
	}
	c := start(t, WithAuthorizer(deny))
	_, err := c.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	require.NoError(t, err)
	_, err = c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 0, Ttl: durationpb.New(time.Minute)})
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.Equal(t, "not an operator", status.Convert(err).Message())
	watch, err := c.WatchLimits(t.Context(), &sluicev1.WatchLimitsRequest{})
	require.NoError(t, err)
	_, err = watch.Recv()
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.Equal(t, []string{"/sluice.v1.LimitsService/ListLimits", "/sluice.v1.LimitsService/SetOverride", "/sluice.v1.LimitsService/WatchLimits"}, seen)
}

func TestRegisterErrors(t *testing.T) {
	_, err := newService(nil)
	assert.EqualError(t, err, "admin: Register needs the Limits to serve (an *interceptor.Server or *interceptor.Client)")
	limits, err := interceptor.NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, limits.Close()) }()
	tests := []struct {
		name string
		opts []Option
		err  string
	}{
		{"no authorizer", nil, errNoAuthorizer},
		{"only bounds", []Option{WithMaxWatches(3), WithLogger(slog.Default())}, errNoAuthorizer},
		{"nil authorizer", []Option{WithAuthorizer(nil)},
			"admin: WithAuthorizer(nil): give an Authorizer that decides who may change limits"},
		{"no tls names", []Option{WithTLSClients()},
			"admin: WithTLSClients(): list the certificate names (DNS, URI or email SANs) to admit"},
		{"empty tls name", []Option{WithTLSClients("ops", "")},
			"admin: WithTLSClients: name 1 is empty; give the DNS, URI or email SAN of an operator certificate"},
		{"no watches", []Option{WithUnixSocketPeers(), WithMaxWatches(0)}, "admin: WithMaxWatches(0): must be at least 1"},
		{"no lifetime", []Option{WithUnixSocketPeers(), WithWatchLifetime(-time.Second)}, "admin: WithWatchLifetime(-1s): must be > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, err := newService(limits, tt.opts...)
			assert.Nil(t, svc)
			assert.EqualError(t, err, tt.err)
		})
	}
}

// TestLeadingSlash: a limiter is found by the name code gives its method,
// "/pkg.Svc/Method", as well as by the name ListLimits shows.
func TestLeadingSlash(t *testing.T) {
	c := start(t, WithAuthorizer(operator))
	set, err := c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: "/" + unaryLimiter, Limit: 2, Ttl: durationpb.New(time.Hour)})
	require.NoError(t, err)
	assert.Equal(t, unaryLimiter, set.GetLimiter().GetName())
	assert.Equal(t, int32(2), set.GetLimiter().GetLimit())
	dry, err := c.SetDryRun(t.Context(), &sluicev1.SetDryRunRequest{Name: "/" + unaryLimiter, DryRun: true})
	require.NoError(t, err)
	assert.True(t, dry.GetLimiter().GetDryRun())
	cleared, err := c.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: "/" + unaryLimiter})
	require.NoError(t, err)
	assert.Equal(t, int32(5), cleared.GetLimiter().GetLimit())

	_, err = c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: "//" + unaryLimiter, Limit: 2, Ttl: durationpb.New(time.Hour)})
	assert.Equal(t, codes.NotFound, status.Code(err), "one slash, not any number")
	assert.Contains(t, status.Convert(err).Message(), "ListLimits lists the live ones")
}

// TestListedFromTheStart: with CheckRegistered, ListLimits shows every
// registered method's limiter before any call.
func TestListedFromTheStart(t *testing.T) {
	limits, err := interceptor.NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, limits.Close()) }()
	svc, err := newService(limits, WithAuthorizer(operator))
	require.NoError(t, err)
	gs := grpc.NewServer(limits.ServerOptions()...)
	testpb.RegisterTestServiceServer(gs, &testpb.Service{})
	sluicev1.RegisterLimitsServiceServer(gs, svc)
	defer gs.Stop()
	require.NoError(t, limits.CheckRegistered(gs))

	resp, err := svc.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	require.NoError(t, err)
	var names []string
	for _, l := range resp.GetLimiters() {
		names = append(names, l.GetName())
	}
	assert.ElementsMatch(t, []string{
		"sluice.test.v1.TestService/Unary", "sluice.test.v1.TestService/ServerStream",
		"sluice.test.v1.TestService/ClientStream", "sluice.test.v1.TestService/Bidi",
	}, names, "the admin service itself is exempt")
}
