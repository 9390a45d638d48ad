package interceptor

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func withPriority(p string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-priority", p))
}

func TestPrioritySheddingOrder(t *testing.T) {
	s, err := NewServer(WithDefault(fixed(10)), WithPriorityHeader("X-Priority"),
		WithPriorityShares(PriorityShares{Default: 0.9, Sheddable: 0.5}))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	r := s.tab.Load().lookup(unaryMethod)

	// With k calls in flight, which priorities are still admitted?
	tests := []struct {
		inflight                    int
		sheddable, normal, critical bool
	}{
		{0, true, true, true},
		{4, true, true, true},
		{5, false, true, true}, // sheddable may use half of 10
		{8, false, true, true},
		{9, false, false, true}, // default may use 9 of 10
		{10, false, false, false},
	}
	for _, tt := range tests {
		var held []limiter.Token
		for range tt.inflight {
			tok, rej := s.admit(withPriority("critical"), r)
			require.Nil(t, rej)
			held = append(held, tok)
		}
		for p, want := range map[string]bool{"sheddable": tt.sheddable, "default": tt.normal, "critical": tt.critical} {
			tok, rej := s.admit(withPriority(p), r)
			assert.Equal(t, want, rej == nil, "%s with %d in flight", p, tt.inflight)
			if rej == nil {
				s.release(t.Context(), r, &tok, limiter.Ignored, true)
			}
		}
		for i := range held {
			s.release(t.Context(), r, &held[i], limiter.Ignored, true)
		}
		require.Zero(t, r.gate.lim.Inflight())
	}
}

func TestPriorityFromLimitAndHeader(t *testing.T) {
	s, err := NewServer(WithPriorityHeader("x-priority"),
		WithMethod(unaryMethod, Limit{Algorithm: Fixed(4), Priority: PrioritySheddable}))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	r := s.tab.Load().lookup(unaryMethod)
	tests := []struct {
		name string
		ctx  context.Context
		want Priority
	}{
		{"from the method's Limit", context.Background(), PrioritySheddable},
		{"header overrides", withPriority("Critical"), PriorityCritical},
		{"unknown header value ignored", withPriority("urgent!"), PrioritySheddable},
		{"outgoing header ignored on a server", metadata.AppendToOutgoingContext(context.Background(), "x-priority", "critical"), PrioritySheddable},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, s.priority(tt.ctx, r), tt.name)
	}
}

func TestPriorityNeverExceedsLimit(t *testing.T) {
	const limit = 8
	s, err := NewServer(WithDefault(fixed(limit)), WithPriorityHeader("x-priority"),
		WithPriorityShares(PriorityShares{Default: 0.75, Sheddable: 0.25}))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	r := s.tab.Load().lookup(unaryMethod)
	ctxs := []context.Context{withPriority("sheddable"), withPriority("default"), withPriority("critical")}

	var inflight, peak atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 2000 {
				tok, rej := s.admit(ctxs[(g+i)%3], r)
				if rej != nil {
					continue
				}
				raisePeak(&peak, inflight.Add(1))
				inflight.Add(-1)
				s.release(context.Background(), r, &tok, limiter.Ignored, true)
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(limit), "calls of all priorities together exceeded the limit")
	assert.Zero(t, r.gate.lim.Inflight())
}

func TestPriorityOverGRPC(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{
		server:   []Option{WithMethod(unaryMethod, fixed(2)), WithPriorityHeader("x-priority")},
		noClient: true,
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.NoError(t, err)
	})
	b.awaitEntered(t, 1)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-priority", "sheddable")
	_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "sluice: server rejected /sluice.test.v1.TestService/Unary: concurrency limit 2 reached for its priority (1 in flight, 0 queued)",
		status.Convert(err).Message())
	e.awaitRejection(t, "server:priority")

	close(b.release)
	wg.Wait()
	e.awaitRelease(t, "server")
}

func TestPriorityErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"sheddable above default", WithPriorityShares(PriorityShares{Default: 0.5, Sheddable: 0.8}),
			"interceptor: WithPriorityShares({Default:0.5 Sheddable:0.8}): want 0 < Sheddable <= Default <= 1"},
		{"zero shares", WithPriorityShares(PriorityShares{}),
			"interceptor: WithPriorityShares({Default:0 Sheddable:0}): want 0 < Sheddable <= Default <= 1"},
		{"empty header", WithPriorityHeader(" "),
			`interceptor: WithPriorityHeader(" "): a metadata key is required`},
		{"priority out of range", WithDefault(Limit{Priority: 7}),
			"interceptor: WithDefault: Limit.Priority is 7, must be PriorityCritical, PriorityDefault or PrioritySheddable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(tt.opt)
			assert.EqualError(t, err, tt.want)
		})
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]Priority{"critical": PriorityCritical, " SHEDDABLE ": PrioritySheddable, "Default": PriorityDefault} {
		p, ok := ParsePriority(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, p, in)
		assert.Equal(t, strings.TrimSpace(strings.ToLower(in)), p.String())
	}
	_, ok := ParsePriority("high")
	assert.False(t, ok)
	assert.Equal(t, "Priority(5)", Priority(5).String())
}

// raisePeak sets peak to max(peak, n).
func raisePeak(peak *atomic.Int64, n int64) {
	for {
		old := peak.Load()
		if n <= old || peak.CompareAndSwap(old, n) {
			return
		}
	}
}
