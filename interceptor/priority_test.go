package interceptor

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func withPriority(p string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-priority", p))
}

// trustAll believes every caller's priority header.
func trustAll(context.Context) bool { return true }

// fromPeer is a server call's context with the remote address addr and
// the x-priority header values vs.
func fromPeer(addr string, vs ...string) context.Context {
	md := metadata.MD{}
	for _, v := range vs {
		md.Append("x-priority", v)
	}
	ctx := metadata.NewIncomingContext(context.Background(), md)
	if addr == "" {
		return ctx
	}
	return peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))})
}

// Attack: any client could claim critical priority, and when an edge
// proxy appended its own value the client's (first) one won.
func TestPriorityHeaderTrust(t *testing.T) {
	limit := WithMethod(unaryMethod, Limit{Algorithm: limiter.FixedConfig{Limit: 4}, Priority: PrioritySheddable})
	header := Priorities{Header: "x-priority", MaxClaimed: PriorityCritical}
	edge := header
	edge.TrustedPeers = []string{"10.0.0.0/8", "2001:db8::1"}
	capped := edge
	capped.MaxClaimed = PriorityDefault
	byFunc := header
	byFunc.Trusted = trustAll
	tests := []struct {
		name string
		p    Priorities
		ctx  context.Context
		want Priority
	}{
		{"untrusted by default", header, fromPeer("203.0.113.9:5000", "critical"), PrioritySheddable},
		{"no peer, no trust", edge, fromPeer("", "critical"), PrioritySheddable},
		{"peer outside the trusted networks", edge, fromPeer("203.0.113.9:5000", "critical"), PrioritySheddable},
		{"trusted network", edge, fromPeer("10.1.2.3:5000", "critical"), PriorityCritical},
		{"trusted single address", edge, fromPeer("[2001:db8::1]:443", "default"), PriorityDefault},
		{"IPv4 mapped in IPv6", edge, fromPeer("[::ffff:10.1.2.3]:5000", "critical"), PriorityCritical},
		{"the edge's appended value wins", edge, fromPeer("10.1.2.3:5000", "critical", "sheddable"), PrioritySheddable},
		{"last of a joined value wins", edge, fromPeer("10.1.2.3:5000", "critical, default"), PriorityDefault},
		{"unknown last value: no claim", edge, fromPeer("10.1.2.3:5000", "critical", "urgent!"), PrioritySheddable},
		{"claims above the cap are lowered", capped, fromPeer("10.1.2.3:5000", "critical"), PriorityDefault},
		{"claims below the cap stand", capped, fromPeer("10.1.2.3:5000", "sheddable"), PrioritySheddable},
		{"the cap is default unless set", Priorities{Header: "x-priority", Trusted: trustAll}, fromPeer("", "critical"), PriorityDefault},
		{"trust func", byFunc, fromPeer("", "critical"), PriorityCritical},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewServer(WithPriorities(tt.p), limit)
			require.NoError(t, err)
			defer func() { assert.NoError(t, s.Close()) }()
			assert.Equal(t, tt.want, s.priority(tt.ctx, s.tab.Load().lookup(unaryMethod)))
		})
	}
}

// A client reads its own outgoing header: no trust needed, the cap holds.
func TestClientPriorityHeader(t *testing.T) {
	c, err := NewClient(WithPriorities(Priorities{Header: "x-priority", MaxClaimed: PriorityDefault}))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	r := c.tab.Load().lookup(unaryMethod)
	out := func(v string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-priority", v)
	}
	assert.Equal(t, PrioritySheddable, c.priority(out("sheddable"), r))
	assert.Equal(t, PriorityDefault, c.priority(out("critical"), r))
}

// The trust check runs over gRPC with the real peer address.
func TestPriorityTrustOverGRPC(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trusted string
		want    codes.Code
	}{
		{"loopback trusted: the sheddable claim counts", "127.0.0.0/8", codes.ResourceExhausted},
		{"loopback untrusted: the claim is ignored", "10.0.0.0/8", codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBlock()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				if _, ok := metadata.FromIncomingContext(ctx); ok && len(metadata.ValueFromIncomingContext(ctx, "x-priority")) > 0 {
					return &testpb.UnaryResponse{}, nil
				}
				return &testpb.UnaryResponse{}, b.wait(ctx)
			}}
			e := newEnv(t, svc, envConfig{
				server:   []ServerOption{WithMethod(unaryMethod, fixed(2)), WithPriorities(Priorities{Header: "x-priority", TrustedPeers: []string{tt.trusted}, MaxClaimed: PriorityCritical})},
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
			assert.Equal(t, tt.want, status.Code(err))
			if tt.want == codes.OK {
				e.awaitRelease(t, "server")
			}
			close(b.release)
			wg.Wait()
			e.awaitRelease(t, "server")
		})
	}
}

func TestPrioritySheddingOrder(t *testing.T) {
	s, err := NewServer(WithDefault(fixed(10)), WithPriorities(Priorities{Header: "X-Priority", Trusted: trustAll,
		MaxClaimed: PriorityCritical, Shares: PriorityShares{Default: 0.9, Sheddable: 0.5}}))
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
	s, err := NewServer(WithPriorities(Priorities{Header: "x-priority", Trusted: trustAll, MaxClaimed: PriorityCritical}),
		WithMethod(unaryMethod, Limit{Algorithm: limiter.FixedConfig{Limit: 4}, Priority: PrioritySheddable}))
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
	s, err := NewServer(WithDefault(fixed(limit)), WithPriorities(Priorities{Header: "x-priority", Trusted: trustAll,
		MaxClaimed: PriorityCritical, Shares: PriorityShares{Default: 0.75, Sheddable: 0.25}}))
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
		server:   []ServerOption{WithMethod(unaryMethod, fixed(2)), WithPriorities(Priorities{Header: "x-priority", TrustedPeers: []string{"127.0.0.1/32", "::1/128"}, MaxClaimed: PriorityCritical})},
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
		opt  ServerOption
		want string
	}{
		{"sheddable above default", WithPriorities(Priorities{Shares: PriorityShares{Default: 0.5, Sheddable: 0.8}}),
			"interceptor: WithPriorities: Shares {Default:0.5 Sheddable:0.8}: want 0 < Sheddable <= Default <= 1"},
		{"no sheddable share", WithPriorities(Priorities{Shares: PriorityShares{Default: 1}}),
			"interceptor: WithPriorities: Shares {Default:1 Sheddable:0}: want 0 < Sheddable <= Default <= 1"},
		{"blank header", WithPriorities(Priorities{Header: " "}),
			`interceptor: WithPriorities: Header " ": want a metadata key, or empty for none`},
		{"bad trusted network", WithPriorities(Priorities{TrustedPeers: []string{"10.0.0.0/8", "10.0.0/8"}}),
			`interceptor: WithPriorities: TrustedPeers "10.0.0/8": want an IP address or a network in CIDR notation, such as "10.0.0.0/8" or "fd00::/8"`},
		{"cap out of range", WithPriorities(Priorities{MaxClaimed: 3}),
			"interceptor: WithPriorities: MaxClaimed Priority(3): want PriorityCritical, PriorityDefault or PrioritySheddable"},
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
		p, ok := parsePriority(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, p, in)
		assert.Equal(t, strings.TrimSpace(strings.ToLower(in)), p.String())
	}
	_, ok := parsePriority("high")
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
