package interceptor

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/ratelimit"
)

// countingLimiter is a CallerLimiter that records the refunds it gets,
// deciding with a local Keyed.
type countingLimiter struct {
	*ratelimit.Keyed
	mu       sync.Mutex
	refunded []string
}

func (l *countingLimiter) Refund(key string) {
	l.mu.Lock()
	l.refunded = append(l.refunded, key)
	l.mu.Unlock()
	l.Keyed.Refund(key)
}

// TestWithCallerLimiter plugs the local Keyed in through the
// CallerLimiter hook: callers are limited as with a configuration file's caller_limit, and
// a call a later check rejects is refunded to the CallerLimiter.
func TestWithCallerLimiter(t *testing.T) {
	g, err := ratelimit.NewKeyed(0.001, 1)
	require.NoError(t, err)
	l := &countingLimiter{Keyed: g}
	e := newEnv(t, &testpb.Service{}, envConfig{
		server: []ServerOption{
			WithCallerLimiter(callerkey.Metadata("x-api-key"), l),
			WithMethod(unaryMethod, Limit{Rate: RateLimit{PerSecond: 0.001, Burst: 2}}),
		},
		noClient: true,
	})
	call := func(key string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	tests := []struct {
		key    string
		want   codes.Code
		reason string
	}{
		{"alice", codes.OK, ""},
		{"alice", codes.ResourceExhausted, "caller_rate"},
		{"bob", codes.OK, ""},
		{"carol", codes.ResourceExhausted, "rate"}, // the method's rate is spent: carol's quota goes back
	}
	for i, tt := range tests {
		err := call(tt.key)
		require.Equal(t, tt.want, status.Code(err), "call %d (%q): %v", i, tt.key, err)
		if tt.want == codes.OK {
			e.awaitRelease(t, "server")
			continue
		}
		e.awaitRejection(t, "server:"+tt.reason)
		if tt.reason == "caller_rate" {
			assert.Contains(t, status.Convert(err).Message(), "caller quota exceeded, retry after")
			assert.Greater(t, retryInfo(t, err), 900*time.Second)
		}
	}
	l.mu.Lock()
	assert.Equal(t, []string{"carol"}, l.refunded, "only the call the method's rate rejected is refunded")
	l.mu.Unlock()
	d, err := g.Allow("carol")
	require.NoError(t, err)
	assert.True(t, d.Allowed, "carol's quota was given back")
}

func TestWithCallerLimiterErrors(t *testing.T) {
	g, err := ratelimit.NewKeyed(1, 1)
	require.NoError(t, err)
	tests := []struct {
		name string
		opts []ServerOption
		want string
	}{
		{"nil key func", []ServerOption{WithCallerLimiter(nil, g)},
			`interceptor: WithCallerLimiter: the callerkey.Func is nil; use callerkey.PeerIP, callerkey.PeerIdentity, a callerkey.IP, callerkey.Metadata or a func of your own`},
		{"nil limiter", []ServerOption{WithCallerLimiter(callerkey.PeerIP, nil)},
			`interceptor: WithCallerLimiter: the CallerLimiter is nil; use a ratelimit.Keyed for a quota of this process`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(tt.opts...)
			assert.EqualError(t, err, tt.want)
		})
	}
}

// TestWithCallerLimiterLastWins: the last of a file's caller_limit and
// WithCallerLimiter is the quota, and a Reload keeps a CallerLimiter as is.
func TestWithCallerLimiterLastWins(t *testing.T) {
	g, err := ratelimit.NewKeyed(1, 1)
	require.NoError(t, err)
	s, err := NewServer(callerRateLimit(callerkey.PeerIP, RateLimit{PerSecond: 5}, 0), WithCallerLimiter(callerkey.PeerIP, g))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	assert.Same(t, g, s.tab.Load().callers.lim)
	assert.Nil(t, s.tab.Load().callers.gcra)
	require.NoError(t, s.Reload())
	assert.Same(t, g, s.tab.Load().callers.lim)

	require.NoError(t, s.Reload(callerRateLimit(callerkey.PeerIP, RateLimit{PerSecond: 5}, 0)))
	cl := s.tab.Load().callers
	require.NotNil(t, cl.gcra)
	assert.Same(t, cl.gcra, cl.lim)
	assert.Equal(t, 5.0, cl.gcra.Rate())
}
