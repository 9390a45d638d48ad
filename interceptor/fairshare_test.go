package interceptor

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/ratelimit"
)

// TestFairShareOverGRPC: with a limit of 8, beside a light tenant holding
// one permit, the heavy one stops at six, leaving one free, rejected for
// its share; the light tenant still gets in, and one past the limit.
func TestFairShareOverGRPC(t *testing.T) {
	for _, early := range []bool{false, true} {
		name := "interceptor"
		if early {
			name = "early rejection"
		}
		t.Run(name, func(t *testing.T) {
			b := newBlock()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				return &testpb.UnaryResponse{}, b.wait(ctx)
			}}
			opts := []ServerOption{WithMethod(unaryMethod, fixed(8)), WithFairShare(callerkey.Metadata("x-tenant"))}
			if early {
				opts = append(opts, WithEarlyRejection())
			}
			e := newEnv(t, svc, envConfig{server: opts, noClient: true})
			as := func(tenant string) context.Context {
				return metadata.AppendToOutgoingContext(t.Context(), "x-tenant", tenant)
			}
			var wg sync.WaitGroup
			hold := func(tenant string, n int) {
				for range n {
					wg.Go(func() {
						_, err := e.client.Unary(as(tenant), &testpb.UnaryRequest{})
						assert.NoError(t, err)
					})
				}
				b.awaitEntered(t, n)
			}
			hold("light", 1)
			hold("heavy", 6)
			_, err := e.client.Unary(as("heavy"), &testpb.UnaryRequest{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Equal(t, "sluice: server rejected /sluice.test.v1.TestService/Unary: concurrency limit 8 reached for a caller over its fair share (7 in flight, 0 queued)",
				status.Convert(err).Message())
			e.awaitRejection(t, "server:fair_share")
			hold("light", 2) // the permit heavy had to leave, and one past the limit

			_, err = e.client.Unary(as("light"), &testpb.UnaryRequest{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "the limit is full")
			e.awaitRejection(t, "server:limit")

			close(b.release)
			wg.Wait()
			for range 9 {
				e.awaitRelease(t, "server")
			}
		})
	}
}

// TestFairShareAlone: a lone caller may use the whole limit.
func TestFairShareAlone(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{server: []ServerOption{WithMethod(unaryMethod, fixed(4)), WithFairShare(callerkey.PeerIP)}, noClient: true})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			assert.NoError(t, err)
		})
	}
	b.awaitEntered(t, 4)
	close(b.release)
	wg.Wait()
}

func TestFairShareNilKey(t *testing.T) {
	_, err := NewServer(WithFairShare(nil))
	assert.EqualError(t, err, "interceptor: WithFairShare: the callerkey.Func is nil; use callerkey.PeerIdentity, callerkey.PeerIP, a callerkey.IP, callerkey.Metadata or a func of your own")
}

// TestFairShareDryRun: in a dry run a call over its share is recorded as
// a fair_share rejection and goes on.
func TestFairShareDryRun(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{
		server:   []ServerOption{WithMethod(unaryMethod, fixed(4)), WithFairShare(callerkey.Metadata("x-tenant")), WithDryRun()},
		noClient: true,
	})
	var wg sync.WaitGroup
	call := func(tenant string) {
		wg.Go(func() {
			_, err := e.client.Unary(metadata.AppendToOutgoingContext(t.Context(), "x-tenant", tenant), &testpb.UnaryRequest{})
			assert.NoError(t, err)
		})
		b.awaitEntered(t, 1)
	}
	call("light")
	for range 3 {
		call("heavy") // the third leaves no permit free: over its share
	}
	e.awaitRejection(t, "server:fair_share")
	close(b.release)
	wg.Wait()
}

// tenantKey names a client call's tenant from its outgoing metadata.
func tenantKey(ctx context.Context, _ string) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get("x-tenant"); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// TestFairShareOnClient: a client multiplexing tenants shares its limit
// among them as a server does.
func TestFairShareOnClient(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{noServer: true, client: []ClientOption{WithMethod(unaryMethod, fixed(8)), WithFairShare(tenantKey)}})
	as := func(tenant string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "x-tenant", tenant)
	}
	var wg sync.WaitGroup
	for _, tenant := range []string{"light", "heavy", "heavy", "heavy", "heavy", "heavy", "heavy"} {
		wg.Go(func() {
			_, err := e.client.Unary(as(tenant), &testpb.UnaryRequest{})
			assert.NoError(t, err)
		})
		b.awaitEntered(t, 1)
	}
	_, err := e.client.Unary(as("heavy"), &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "for a caller over its fair share")
	e.awaitRejection(t, "client:fair_share")
	close(b.release)
	wg.Wait()
}

// TestFairShareRefundsTheQuota: a call fair share turns away gives its
// caller's quota token back.
func TestFairShareRefundsTheQuota(t *testing.T) {
	g, err := ratelimit.NewKeyed(1000, 100)
	require.NoError(t, err)
	quota := &countingLimiter{Keyed: g}
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	key := callerkey.Metadata("x-tenant")
	e := newEnv(t, svc, envConfig{
		server:   []ServerOption{WithMethod(unaryMethod, fixed(8)), WithFairShare(key), WithCallerLimiter(key, quota)},
		noClient: true,
	})
	var wg sync.WaitGroup
	for _, tenant := range []string{"light", "heavy", "heavy", "heavy", "heavy", "heavy", "heavy"} {
		wg.Go(func() {
			_, err := e.client.Unary(metadata.AppendToOutgoingContext(t.Context(), "x-tenant", tenant), &testpb.UnaryRequest{})
			assert.NoError(t, err)
		})
		b.awaitEntered(t, 1)
	}
	_, err = e.client.Unary(metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "heavy"), &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	e.awaitRejection(t, "server:fair_share")
	quota.mu.Lock()
	assert.Equal(t, []string{"heavy"}, quota.refunded)
	quota.mu.Unlock()
	close(b.release)
	wg.Wait()
}
