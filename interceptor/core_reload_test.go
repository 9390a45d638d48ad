package interceptor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func TestSameLimit(t *testing.T) {
	aimd := limiter.AIMDConfig{MaxLimit: 50}
	custom := algorithmFunc(func() (limiter.Algorithm, error) { return limiter.FixedConfig{Limit: 3}.New() })
	tests := []struct {
		name string
		a, b Limit
		want bool
	}{
		{"zero limits", Limit{}, Limit{}, true},
		{"equal AIMD configs", Limit{Algorithm: aimd}, Limit{Algorithm: limiter.AIMDConfig{MaxLimit: 50}}, true},
		{"different AIMD configs", Limit{Algorithm: aimd}, Limit{Algorithm: limiter.AIMDConfig{MaxLimit: 60}}, false},
		{"AIMD vs Fixed", Limit{Algorithm: aimd}, Limit{Algorithm: limiter.FixedConfig{Limit: 50}}, false},
		{"nil vs explicit default", Limit{}, Limit{Algorithm: limiter.AIMDConfig{}}, false},
		{"a configuration of the user's own type never equals", Limit{Algorithm: custom}, Limit{Algorithm: custom}, false},
		{"queue differs", Limit{Queue: limiter.Queue{Size: 2}}, Limit{Queue: limiter.Queue{Size: 3}}, false},
		{"rate differs", Limit{Rate: RateLimit{PerSecond: 1}}, Limit{Rate: RateLimit{PerSecond: 2}}, false},
		{"priority differs", Limit{Priority: PriorityCritical}, Limit{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, sameLimit(tt.a, tt.b))
		})
	}
}

func TestReloadKeepsUnchangedLimiters(t *testing.T) {
	unary := perCall()
	s, err := NewServer(WithMethod(unaryMethod, unary), WithMethod(testService, fixed(3)), WithDefault(fixed(5)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()

	// Give the unary limiter some state: one drop halves it to 5.
	r := s.tab.Load().lookup(unaryMethod)
	tok, rej := s.admit(t.Context(), r)
	require.Nil(t, rej)
	s.finish(t.Context(), r, &tok, Result{Err: status.Error(codes.ResourceExhausted, "")})
	require.Equal(t, 5, r.gate.lim.Limit())
	oldStream := gateOf(s.core, serverStreamMethod)
	oldDefault := gateOf(s.core, "/other.v1.Svc/Get")

	require.NoError(t, s.Reload(WithMethod(unaryMethod, unary), WithMethod(testService, fixed(4)), WithDefault(fixed(5))))

	assert.Same(t, r.gate, gateOf(s.core, unaryMethod), "unchanged entry keeps its limiter")
	assert.Equal(t, 5, gateOf(s.core, unaryMethod).lim.Limit(), "and its learned limit")
	assert.NotSame(t, oldStream, gateOf(s.core, serverStreamMethod), "changed entry is rebuilt")
	assert.Equal(t, 4, gateOf(s.core, serverStreamMethod).lim.Limit())
	assert.Same(t, oldDefault, gateOf(s.core, "/other.v1.Svc/Get"), "default limiters are kept with an unchanged default")

	var names []string
	for _, l := range s.Limiters() {
		names = append(names, l.Name)
	}
	assert.ElementsMatch(t, []string{"sluice.test.v1.TestService/Unary", "other.v1.Svc/Get", "sluice.test.v1.TestService/"}, names,
		"the replaced limiter is no longer reported")
}

func TestReloadRefusesBadConfig(t *testing.T) {
	s, err := NewServer(WithDefault(fixed(5)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	before := s.tab.Load()
	err = s.Reload(WithMethod("no-slash", Limit{}), WithDefault(fixed(9)))
	assert.EqualError(t, err, `interceptor: method name "no-slash" does not start with '/': want "/package.Service/Method" or "/package.Service/"`)
	assert.Same(t, before, s.tab.Load(), "nothing is half-applied")
	assert.Equal(t, 5, gateOf(s.core, unaryMethod).lim.Limit())
}

func TestReloadChangesSettings(t *testing.T) {
	c, err := NewClient()
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	require.NoError(t, c.Reload(WithMaxPushback(0), WithExempt(unaryMethod)))
	assert.Zero(t, c.tab.Load().maxHold)
	assert.Nil(t, gateOf(c.core, unaryMethod), "newly exempt")
}

func TestReloadUnderLoad(t *testing.T) {
	var served atomic.Int64
	progress := make(chan struct{}, 1)
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		served.Add(1)
		select {
		case progress <- struct{}{}:
		default:
		}
		timer := time.NewTimer(time.Duration(served.Load()%3) * time.Millisecond)
		defer timer.Stop()
		select {
		case <-timer.C:
			return &testpb.UnaryResponse{}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	e := newEnv(t, svc, envConfig{server: []ServerOption{WithMethod(unaryMethod, fixed(4))}, noClient: true})
	hook(t, e.srv.core, func(h *testhook.Hooks) { h.Released, h.Rejected = nil, nil })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := e.client.Unary(context.Background(), &testpb.UnaryRequest{})
				if c := status.Code(err); c != codes.OK && c != codes.ResourceExhausted {
					t.Errorf("unexpected %v", err)
				}
			}
		})
	}
	// Every limiter ever used, to check each one drains, replaced or not.
	seen := map[*gate]bool{}
	configs := [][]ServerOption{
		{WithMethod(unaryMethod, fixed(4))},
		{WithMethod(unaryMethod, fixed(2)), WithMethod(testService, fixed(3))},
		{WithMethod(testService, Limit{Algorithm: limiter.FixedConfig{Limit: 6}, Queue: limiter.Queue{Size: 4}})},
		{WithExempt(unaryMethod)},
	}
	for i := range 60 {
		if g := gateOf(e.srv.core, unaryMethod); g != nil {
			seen[g] = true
		}
		require.NoError(t, e.srv.Reload(configs[i%len(configs)]...))
		if i%10 == 9 {
			// Let calls run on this configuration for a few of them.
			for range 20 {
				<-progress
			}
		}
	}
	close(stop)
	wg.Wait()
	e.stop()
	require.Greater(t, len(seen), 10)
	for g := range seen {
		assert.Zero(t, g.lim.Inflight(), "limiter %s (%p) kept a permit across reloads", g.name, g)
	}
	assert.Positive(t, served.Load())
}

func TestReloadLayersOverBuiltWith(t *testing.T) {
	s, err := NewServer(WithMethod(unaryMethod, fixed(3)), WithDefault(fixed(5)),
		callerRateLimit(callerkey.PeerIP, RateLimit{PerSecond: 1}, 0))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	other := "/other.v1.Svc/Get"
	tests := []struct {
		name          string
		opts          []ServerOption
		unary, def    int
		callers       RateLimit
		wantErr       string
		unaryIsExempt bool
	}{
		{"nothing: as built", nil, 3, 5, RateLimit{PerSecond: 1}, "", false},
		{"a method replaced", []ServerOption{WithMethod(unaryMethod, fixed(7))}, 7, 5, RateLimit{PerSecond: 1}, "", false},
		{"the default replaced, the method as built", []ServerOption{WithDefault(fixed(9))}, 3, 9, RateLimit{PerSecond: 1}, "", false},
		{"the quota replaced", []ServerOption{callerRateLimit(callerkey.PeerIP, RateLimit{PerSecond: 2}, 0)}, 3, 5, RateLimit{PerSecond: 2}, "", false},
		{"a method made exempt", []ServerOption{WithExempt(unaryMethod)}, 0, 5, RateLimit{PerSecond: 1}, "", true},
		{"twice in one layer", []ServerOption{WithMethod(unaryMethod, fixed(7)), WithMethod(unaryMethod, fixed(8))}, 3, 5, RateLimit{PerSecond: 1},
			`interceptor: method "/sluice.test.v1.TestService/Unary" is configured twice`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Reload(tt.opts...)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.NoError(t, s.Reload())
			} else {
				require.NoError(t, err)
			}
			if tt.unaryIsExempt {
				assert.Nil(t, gateOf(s.core, unaryMethod))
			} else {
				assert.Equal(t, tt.unary, gateOf(s.core, unaryMethod).lim.Limit())
			}
			assert.Equal(t, tt.def, gateOf(s.core, other).lim.Limit())
			assert.Equal(t, tt.callers, s.tab.Load().callers.rate)
		})
	}
}
