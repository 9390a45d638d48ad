package interceptor

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func TestClientRejectsLocally(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		return &testpb.UnaryResponse{}, b.wait(ctx)
	}}
	e := newEnv(t, svc, envConfig{noServer: true, client: []ClientOption{WithMethod(unaryMethod, fixed(1))}})

	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.NoError(t, err)
	})
	b.awaitEntered(t, 1)
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "sluice: client rejected /sluice.test.v1.TestService/Unary: concurrency limit 1 reached (1 in flight, 0 queued)",
		status.Convert(err).Message())
	assert.Empty(t, b.entered, "a rejected call never reaches the server")

	close(b.release)
	wg.Wait()
	e.awaitRelease(t, "client")
}

// manualTimer replaces a Client's timers so tests decide when a held
// permit comes back.
type manualTimer struct {
	mu    sync.Mutex
	after []time.Duration
	funcs []func()
}

func (m *manualTimer) afterFunc(d time.Duration, f func()) (stop func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.after = append(m.after, d)
	m.funcs = append(m.funcs, f)
	return func() bool { return false }
}

func (m *manualTimer) fire() {
	m.mu.Lock()
	funcs := m.funcs
	m.funcs = nil
	m.mu.Unlock()
	for _, f := range funcs {
		f()
	}
}

func TestClientHonoursPushback(t *testing.T) {
	tests := []struct {
		name     string
		maxHold  []ClientOption
		pushback time.Duration
		held     []time.Duration // pushbacks honoured; none: released at once
	}{
		{"held for the server's pushback", nil, 250 * time.Millisecond, []time.Duration{250 * time.Millisecond}},
		{"held no longer than WithMaxPushback", []ClientOption{WithMaxPushback(100 * time.Millisecond)}, time.Hour, []time.Duration{100 * time.Millisecond}},
		{"not held when honouring is off", []ClientOption{WithMaxPushback(0)}, 250 * time.Millisecond, nil},
		{"not held without a pushback trailer", nil, NoPushback, nil},
		{"held for WithMaxPushback when told not to retry", []ClientOption{WithMaxPushback(100 * time.Millisecond)}, DoNotRetry, []time.Duration{100 * time.Millisecond}},
		{"not held for a zero pushback", nil, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBlock()
			svc := &testpb.Service{UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
				return &testpb.UnaryResponse{}, b.wait(ctx)
			}}
			pushback := func(LimiterState) time.Duration { return tt.pushback }
			e := newEnv(t, svc, envConfig{
				server: []ServerOption{WithMethod(unaryMethod, fixed(1)), WithPushback(pushback)},
				client: append([]ClientOption{WithDefault(perCall())}, tt.maxHold...),
			})
			timer := &manualTimer{}
			hook(t, e.cli.core, func(h *testhook.Hooks) { h.AfterFunc = timer.afterFunc })
			cg := gateOf(e.cli.core, unaryMethod)

			var wg sync.WaitGroup
			wg.Go(func() {
				_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
				assert.NoError(t, err)
			})
			b.awaitEntered(t, 1)

			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "the server rejects")
			assert.Equal(t, tt.held, timer.after)
			if tt.held != nil {
				assert.Equal(t, 2, cg.lim.Inflight(), "the rejected call's permit is held")
				assert.Equal(t, 10, cg.lim.Limit(), "the drop is applied when the hold ends")
				timer.fire()
			}
			e.awaitRelease(t, "client")
			assert.Equal(t, 1, cg.lim.Inflight())
			assert.Equal(t, 5, cg.lim.Limit(), "the client backs off when the server rejects")

			close(b.release)
			wg.Wait()
			e.awaitRelease(t, "server")
			e.awaitRelease(t, "client")
		})
	}
}

// failingStreamer is a client interceptor after sluice that fails before
// gRPC sees the stream.
func failingStreamer(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.ResourceExhausted, "a later interceptor refused")
}

func TestClientStreamReleasesOnce(t *testing.T) {
	hold := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	svc := &testpb.Service{
		ServerStreamFunc: func(req *testpb.ServerStreamRequest, s grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
			switch req.GetPayload() {
			case "exhausted":
				return status.Error(codes.ResourceExhausted, "full")
			case "hold":
				if err := s.Send(&testpb.ServerStreamResponse{}); err != nil {
					return err
				}
				return hold(s.Context())
			}
			return s.Send(&testpb.ServerStreamResponse{})
		},
	}
	tests := []struct {
		name  string
		run   func(t *testing.T, c testpb.TestServiceClient)
		limit int // from 10
	}{
		{"server stream read to io.EOF", func(t *testing.T, c testpb.TestServiceClient) {
			s, err := c.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
			require.NoError(t, err)
			_, err = s.Recv()
			require.NoError(t, err)
			_, err = s.Recv()
			require.ErrorIs(t, err, io.EOF)
		}, 10},
		{"server error", func(t *testing.T, c testpb.TestServiceClient) {
			s, err := c.ServerStream(t.Context(), &testpb.ServerStreamRequest{Payload: "exhausted"})
			require.NoError(t, err)
			_, err = s.Recv()
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
		}, 5},
		{"cancelled mid-stream", func(t *testing.T, c testpb.TestServiceClient) {
			ctx, cancel := context.WithCancel(t.Context())
			s, err := c.ServerStream(ctx, &testpb.ServerStreamRequest{Payload: "hold"})
			require.NoError(t, err)
			_, err = s.Recv()
			require.NoError(t, err)
			cancel()
			_, err = s.Recv()
			require.Equal(t, codes.Canceled, status.Code(err))
		}, 10},
		{"abandoned: context cancelled, never read again", func(t *testing.T, c testpb.TestServiceClient) {
			ctx, cancel := context.WithCancel(t.Context())
			s, err := c.ServerStream(ctx, &testpb.ServerStreamRequest{Payload: "hold"})
			require.NoError(t, err)
			_, err = s.Recv()
			require.NoError(t, err)
			cancel()
		}, 10},
		{"deadline passes mid-stream", func(t *testing.T, c testpb.TestServiceClient) {
			// Long enough for the first message on a cold connection.
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			s, err := c.ServerStream(ctx, &testpb.ServerStreamRequest{Payload: "hold"})
			require.NoError(t, err)
			_, err = s.Recv()
			require.NoError(t, err)
			_, err = s.Recv()
			require.Equal(t, codes.DeadlineExceeded, status.Code(err))
		}, 5},
		{"client stream: CloseAndRecv", func(t *testing.T, c testpb.TestServiceClient) {
			s, err := c.ClientStream(t.Context())
			require.NoError(t, err)
			require.NoError(t, s.Send(&testpb.ClientStreamRequest{}))
			resp, err := s.CloseAndRecv()
			require.NoError(t, err)
			assert.Equal(t, int32(1), resp.GetCount())
		}, 10},
		{"bidi: CloseSend then read to io.EOF", func(t *testing.T, c testpb.TestServiceClient) {
			s, err := c.Bidi(t.Context())
			require.NoError(t, err)
			require.NoError(t, s.Send(&testpb.BidiRequest{Payload: "x"}))
			require.NoError(t, s.CloseSend())
			_, err = s.Recv()
			require.NoError(t, err)
			_, err = s.Recv()
			require.ErrorIs(t, err, io.EOF)
		}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, svc, envConfig{noServer: true, client: []ClientOption{WithDefault(perCall())}})
			tt.run(t, e.client)
			e.awaitRelease(t, "client")
			lowest := limiter.MaxLimit
			for _, m := range []string{serverStreamMethod, clientStreamMethod, bidiMethod} {
				lowest = min(lowest, gateOf(e.cli.core, m).lim.Limit())
			}
			assert.Equal(t, tt.limit, lowest)
		})
	}
}

func TestClientStreamFailingToStart(t *testing.T) {
	svc := &testpb.Service{}
	cli, err := NewClient(WithDefault(perCall()))
	require.NoError(t, err)
	released := make(chan struct{}, 10)
	hook(t, cli.core, func(h *testhook.Hooks) { h.Released = func() { released <- struct{}{} } })
	defer func() { assert.NoError(t, cli.Close()) }()

	e := newEnv(t, svc, envConfig{noServer: true, noClient: true})
	conn, err := grpc.NewClient(e.conn.Target(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainStreamInterceptor(cli.StreamClientInterceptor(), failingStreamer))
	require.NoError(t, err)
	defer func() { assert.NoError(t, conn.Close()) }()

	_, err = testpb.NewTestServiceClient(conn).Bidi(t.Context())
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	<-released
	g := gateOf(cli.core, bidiMethod)
	assert.Zero(t, g.lim.Inflight())
	assert.Equal(t, 5, g.lim.Limit(), "the failure is classified like any other")
	assert.Empty(t, released, "released exactly once")
}

func TestClientStreamConcurrentEndings(t *testing.T) {
	// Many streams ended every way at once: each permit comes back once.
	svc := &testpb.Service{
		BidiFunc: func(s grpc.BidiStreamingServer[testpb.BidiRequest, testpb.BidiResponse]) error {
			req, err := s.Recv()
			if err != nil {
				return err
			}
			switch req.GetPayload() {
			case "fail":
				return status.Error(codes.ResourceExhausted, "full")
			case "hold":
				<-s.Context().Done()
				return s.Context().Err()
			}
			return s.Send(&testpb.BidiResponse{})
		},
	}
	e := newEnv(t, svc, envConfig{noServer: true, client: []ClientOption{WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 1000}})}})
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s, err := e.client.Bidi(ctx)
			if !assert.NoError(t, err) {
				return
			}
			payload := []string{"ok", "fail", "hold", "hold"}[i%4]
			if err := s.Send(&testpb.BidiRequest{Payload: payload}); err != nil && !errors.Is(err, io.EOF) {
				assert.NoError(t, err)
			}
			switch i % 4 {
			case 0, 1:
				for {
					if _, err := s.Recv(); err != nil {
						return
					}
				}
			case 2:
				cancel()
				_, _ = s.Recv()
			case 3:
				cancel() // abandoned
			}
		})
	}
	wg.Wait()
	for range n {
		e.awaitRelease(t, "client")
	}
}

func TestPushbackOf(t *testing.T) {
	tests := []struct {
		name string
		md   metadata.MD
		want time.Duration
		ok   bool
	}{
		{"absent", metadata.MD{}, 0, false},
		{"one value", metadata.Pairs(pushbackKey, "40"), 40 * time.Millisecond, true},
		{"two values", metadata.Pairs(pushbackKey, "40", pushbackKey, "50"), 0, false},
		{"negative: do not retry", metadata.Pairs(pushbackKey, "-40"), DoNotRetry, true},
		{"over int32", metadata.Pairs(pushbackKey, "2147483648"), 0, false},
		{"huge", metadata.Pairs(pushbackKey, "99999999999999999999"), 0, false},
		{"garbage", metadata.Pairs(pushbackKey, "soon"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := pushbackOf(tt.md)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, d)
		})
	}
}

func TestClientExemptAndIgnoredOutcomes(t *testing.T) {
	c, err := NewClient(WithExempt(unaryMethod), WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 1}}))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	calls := 0
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return nil
	}
	for range 3 {
		require.NoError(t, c.unary(t.Context(), unaryMethod, nil, nil, nil, invoker))
	}
	assert.Equal(t, 3, calls)
	assert.Nil(t, gateOf(c.core, unaryMethod))

	// A panic in a later interceptor returns the permit.
	panicky := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		panic("later interceptor bug")
	}
	assert.PanicsWithValue(t, "later interceptor bug", func() {
		_ = c.unary(t.Context(), bidiMethod, nil, nil, nil, panicky)
	})
	assert.Zero(t, gateOf(c.core, bidiMethod).lim.Inflight())
}
