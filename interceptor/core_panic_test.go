package interceptor

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
	"github.com/sluice-go/sluice/limiter"
)

func panickyClassifier(Result) limiter.Outcome { panic("classifier bug") }

func panickyPushback(LimiterState) time.Duration { panic("pushback bug") }

// Attack: a Classifier that panics must not keep the permit. With a fixed
// limit of 2, two leaked permits would reject every later call.
func TestServerPanickingClassifierReleasesPermit(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server:      []ServerOption{WithDefault(fixed(2)), WithClassifier(panickyClassifier)},
		noClient:    true,
		outer:       []grpc.UnaryServerInterceptor{recovery},
		outerStream: []grpc.StreamServerInterceptor{recoveryStream},
	})
	for i := range 4 {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.Equal(t, "panic: classifier bug", status.Convert(err).Message(), "unary call %d: the panic goes on to the recovery interceptor", i)

		stream, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{Count: 1})
		require.NoError(t, err)
		for err == nil {
			_, err = stream.Recv()
		}
		assert.Equal(t, "panic: classifier bug", status.Convert(err).Message(), "stream %d", i)
	}
	for _, m := range []string{unaryMethod, serverStreamMethod} {
		assert.Zero(t, gateOf(e.srv.core, m).lim.Inflight(), "%s: permits held after panics", m)
	}
}

// A panicking PushbackFunc runs only when a call is rejected, so it holds
// no permit; the call's panic reaches the recovery interceptor and every
// permit comes back.
func TestServerPanickingPushbackReleasesPermit(t *testing.T) {
	b := newBlock()
	svc := &testpb.Service{
		UnaryFunc: func(ctx context.Context, _ *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
			return &testpb.UnaryResponse{}, b.wait(ctx)
		},
		ServerStreamFunc: func(_ *testpb.ServerStreamRequest, s grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
			return b.wait(s.Context())
		},
	}
	e := newEnv(t, svc, envConfig{
		server:      []ServerOption{WithDefault(fixed(1)), WithPushback(panickyPushback)},
		noClient:    true,
		outer:       []grpc.UnaryServerInterceptor{recovery},
		outerStream: []grpc.StreamServerInterceptor{recoveryStream},
	})
	done := make(chan error, 2)
	go func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		done <- err
	}()
	go func() {
		s, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		done <- err
	}()
	b.awaitEntered(t, 2)

	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	assert.Equal(t, "panic: pushback bug", status.Convert(err).Message())
	s, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	assert.Equal(t, "panic: pushback bug", status.Convert(err).Message())

	close(b.release)
	for range 2 {
		if err := <-done; !errors.Is(err, io.EOF) {
			assert.NoError(t, err)
		}
	}
	for _, m := range []string{unaryMethod, serverStreamMethod} {
		assert.Zero(t, gateOf(e.srv.core, m).lim.Inflight(), "%s", m)
	}
}

// A callerkey.Func runs before any permit is taken: its panic costs none.
func TestServerPanickingKeyFuncTakesNoPermit(t *testing.T) {
	key := func(context.Context, string) string { panic("key bug") }
	e := newEnv(t, &testpb.Service{}, envConfig{
		server:   []ServerOption{WithDefault(fixed(1)), callerRateLimit(key, RateLimit{PerSecond: 1000}, 0)},
		noClient: true,
		outer:    []grpc.UnaryServerInterceptor{recovery},
	})
	for range 3 {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
		assert.Equal(t, "panic: key bug", status.Convert(err).Message())
	}
	assert.Zero(t, gateOf(e.srv.core, unaryMethod).lim.Inflight())
}

// finishingStreamer stands for gRPC ending a stream at once: it runs the
// OnFinish callbacks sluice passed, in the caller's goroutine.
func finishingStreamer(_ context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			f.OnFinish(nil)
		}
	}
	return nil, nil
}

func okInvoker(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	return nil
}

// Attack: the client's permits survive a panicking Classifier on unary
// calls and streams; the panic goes on to the caller.
func TestClientPanickingClassifierReleasesPermit(t *testing.T) {
	c, err := NewClient(WithDefault(fixed(2)), WithClassifier(panickyClassifier))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	ctx := t.Context()
	for range 4 {
		assert.PanicsWithValue(t, "classifier bug", func() {
			_ = c.unary(ctx, unaryMethod, nil, nil, nil, okInvoker, grpc.StaticMethod())
		})
		assert.PanicsWithValue(t, "classifier bug", func() {
			_, _ = c.stream(ctx, &grpc.StreamDesc{ServerStreams: true}, nil, serverStreamMethod, finishingStreamer, grpc.StaticMethod())
		})
	}
	for _, m := range []string{unaryMethod, serverStreamMethod} {
		assert.Zero(t, gateOf(c.core, m).lim.Inflight(), "%s: permits held after panics", m)
	}
}
