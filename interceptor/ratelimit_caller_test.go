package interceptor

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

// TestCallerTableFlood is the attack on the caller table: a client fills
// it with made-up keys, each still counted; a legitimate caller seen for
// the first time must be admitted all the same.
func TestCallerTableFlood(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server: []ServerOption{
			callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}, 64),
		},
		noClient: true,
	})
	call := func(key string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	for i := range 500 {
		require.NoError(t, call("attacker-"+strconv.Itoa(i)))
		e.awaitRelease(t, "server")
	}
	err := call("legit")
	require.Equal(t, codes.OK, status.Code(err), "a new caller refused: %v", err)
}

// TestCallerOverQuotaKeepsMethodRate is the attack on the order of the
// checks: one caller over its quota must not spend the method's shared
// rate with the calls its quota refuses.
func TestCallerOverQuotaKeepsMethodRate(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server: []ServerOption{
			WithMethod(unaryMethod, Limit{Rate: RateLimit{PerSecond: 0.001, Burst: 10}}),
			callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}, 0),
		},
		noClient: true,
	})
	call := func(key string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	require.NoError(t, call("greedy"))
	e.awaitRelease(t, "server")
	for range 9 {
		require.Equal(t, codes.ResourceExhausted, status.Code(call("greedy")))
		e.awaitRejection(t, "server:caller_rate")
	}
	for i := range 9 {
		err := call("other-" + strconv.Itoa(i))
		require.Equal(t, codes.OK, status.Code(err), "caller %d: %v", i, err)
		e.awaitRelease(t, "server")
	}
	err := call("one-too-many")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "the method's rate still holds")
	e.awaitRejection(t, "server:rate")
}

// TestRejectedByMethodRateKeepsCallerQuota: a call the method's rate
// turns away must not spend its caller's quota either.
func TestRejectedByMethodRateKeepsCallerQuota(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server: []ServerOption{
			WithMethod(unaryMethod, Limit{Rate: RateLimit{PerSecond: 0.001, Burst: 1}}),
			callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}, 0),
		},
		noClient: true,
	})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "a")
	_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	ctx = metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "b")
	_, err = e.client.Unary(ctx, &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	e.awaitRejection(t, "server:rate")
	got := e.srv.tab.Load().callers.gcra
	d, err := got.Allow("b")
	require.NoError(t, err)
	require.True(t, d.Allowed, "b's quota was given back")
}

// TestReloadKeepsCodeOptions is the attack on Reload: options set in code
// (a per-caller quota, the priority header) must survive a reload of a
// config file that does not mention them.
func TestReloadKeepsCodeOptions(t *testing.T) {
	s, err := NewServer(
		callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}, 0),
		WithPriorities(Priorities{Header: "x-priority"}),
	)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	// What a configuration file of {"default": {"fixed": {"limit": 7}}} gives.
	require.NoError(t, s.Reload(fileOption(WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 7}}))))

	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-api-key", "alice"))
	r := s.tab.Load().lookup(unaryMethod)
	_, rej := s.checkRates(ctx, r)
	require.Nil(t, rej)
	_, rej = s.checkRates(ctx, r)
	require.NotNil(t, rej, "the quota of 1 still holds after the reload")
	require.Equal(t, "x-priority", s.tab.Load().priorityHeader)
	require.Equal(t, 7, r.gate.lim.Limit(), "and the file applied")
}

// TestConcurrencyRejectionRefundsRates: a call the concurrency limit turns
// away spends neither its caller's quota nor the method's rate.
func TestConcurrencyRejectionRefundsRates(t *testing.T) {
	s, err := NewServer(
		WithMethod(unaryMethod, Limit{Algorithm: limiter.FixedConfig{Limit: 1}, Rate: RateLimit{PerSecond: 0.001, Burst: 2}}),
		callerRateLimit(callerkey.Metadata("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 2}, 0),
	)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-api-key", "alice"))
	r := s.tab.Load().lookup(unaryMethod)
	held, rej := s.admit(ctx, r)
	require.Nil(t, rej)
	_, rej = s.admit(ctx, r)
	require.NotNil(t, rej, "the only permit is taken")
	require.Contains(t, rej.err.Error(), "concurrency limit 1 reached")
	s.finish(ctx, r, &held, Result{})
	tok, rej := s.admit(ctx, r)
	require.Nil(t, rej, "the rejected call's tokens were given back")
	s.finish(ctx, r, &tok, Result{})
}
