package interceptor

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// maxMsg is the message size limit of the servers in these tests, far
// below what the attacker sends.
const maxMsg = 64

// big is a 1 KiB payload: over maxMsg as it is, under it gzipped.
var big = strings.Repeat("x", 1024)

// serverStreamOnce asks for one answer echoing big and reads it.
func serverStreamOnce(ctx context.Context, c testpb.TestServiceClient) error {
	st, err := c.ServerStream(ctx, &testpb.ServerStreamRequest{Payload: big, Count: 1})
	if err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// TestAttackOversizeStreams is the attack of a caller whose messages grpc-go
// refuses before any handler reads them: over the server's receive or send
// maximum, or over the receive maximum once decompressed. grpc-go answers
// RESOURCE_EXHAUSTED from RecvMsg or SendMsg and the handler returns it, as
// generated code does. The caller's bytes caused it, not the server's load:
// the limit the method shares (here with its whole service, unary calls
// included) must not move.
func TestAttackOversizeStreams(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		serverOpts []grpc.ServerOption
		call       func(ctx context.Context, c testpb.TestServiceClient) error
	}{
		{
			"client stream over the receive maximum", clientStreamMethod,
			[]grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg)},
			func(ctx context.Context, c testpb.TestServiceClient) error {
				st, err := c.ClientStream(ctx)
				if err != nil {
					return err
				}
				_ = st.Send(&testpb.ClientStreamRequest{Payload: big})
				_, err = st.CloseAndRecv()
				return err
			},
		},
		{
			// The generated handler returns RecvMsg's error itself.
			"server stream request over the receive maximum", serverStreamMethod,
			[]grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg)},
			serverStreamOnce,
		},
		{
			// The handler echoes the caller's payload: the caller chose
			// the size of the answer.
			"server stream answer over the send maximum", serverStreamMethod,
			[]grpc.ServerOption{grpc.MaxSendMsgSize(maxMsg)},
			serverStreamOnce,
		},
		{
			"bidi message over the receive maximum once decompressed", bidiMethod,
			[]grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg)},
			func(ctx context.Context, c testpb.TestServiceClient) error {
				st, err := c.Bidi(ctx, grpc.UseCompressor(gzip.Name))
				if err != nil {
					return err
				}
				_ = st.Send(&testpb.BidiRequest{Payload: big})
				_, err = st.Recv()
				return err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, &testpb.Service{}, envConfig{
				noClient:   true,
				server:     []ServerOption{WithMethod(testService, perCall())},
				serverOpts: tt.serverOpts,
			})
			for range 30 {
				err := tt.call(t.Context(), e.client)
				require.Equal(t, codes.ResourceExhausted, status.Code(err), "the attack's call: %v", err)
				require.NotContains(t, status.Convert(err).Message(), "sluice", "the attack's call was refused by sluice, not grpc-go")
				e.awaitRelease(t, "server")
			}
			g := gateOf(e.coreOf(e.srv), tt.method)
			assert.Equal(t, 10, g.lim.Limit(), "the caller's oversize messages moved the limit")
			assert.Same(t, g, gateOf(e.coreOf(e.srv), unaryMethod), "the service's methods share one limiter")
		})
	}
}

// TestAttackOversizeUnary: grpc-go decodes a unary request before any
// interceptor runs, so one over the receive maximum never reaches sluice's
// interceptor. With WithEarlyRejection the tap has taken a permit by then;
// it must come back without moving the limit.
func TestAttackOversizeUnary(t *testing.T) {
	for _, early := range []bool{false, true} {
		name := "interceptor"
		opts := []ServerOption{WithMethod(unaryMethod, perCall())}
		if early {
			name = "tap"
			opts = append(opts, WithEarlyRejection())
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, &testpb.Service{}, envConfig{
				noClient:   true,
				server:     opts,
				serverOpts: []grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg)},
			})
			// The first call creates the limiter, which the tap needs.
			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			require.NoError(t, err)
			e.awaitRelease(t, "server")
			for range 30 {
				_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: big})
				require.Equal(t, codes.ResourceExhausted, status.Code(err))
				require.NotContains(t, status.Convert(err).Message(), "sluice")
				if early {
					e.awaitRelease(t, "server") // the tap's permit
				}
			}
			assert.Equal(t, 10, gateOf(e.coreOf(e.srv), unaryMethod).lim.Limit(), "the caller's oversize requests moved the limit")
		})
	}
}

// TestStreamOwnOverloadStillBacksOff is the rule's other side: a stream
// whose messages went through and whose handler answers RESOURCE_EXHAUSTED
// of its own is overload, and the limit backs off.
func TestStreamOwnOverloadStillBacksOff(t *testing.T) {
	svc := &testpb.Service{ServerStreamFunc: func(_ *testpb.ServerStreamRequest, ss grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
		if err := ss.Send(&testpb.ServerStreamResponse{}); err != nil {
			return err
		}
		return status.Error(codes.ResourceExhausted, "out of workers")
	}}
	e := newEnv(t, svc, envConfig{
		noClient:   true,
		server:     []ServerOption{WithMethod(serverStreamMethod, perCall())},
		serverOpts: []grpc.ServerOption{grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg)},
	})
	st, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
	require.NoError(t, err)
	_, err = st.Recv()
	require.NoError(t, err)
	_, err = st.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	e.awaitRelease(t, "server")
	assert.Equal(t, 5, gateOf(e.coreOf(e.srv), serverStreamMethod).lim.Limit(), "the server's own overload must lower the limit")
}

// fakeStream is a grpc.ServerStream whose RecvMsg and SendMsg return what
// a test queues.
type fakeStream struct {
	grpc.ServerStream
	recv, send []error
}

func (f *fakeStream) RecvMsg(any) error {
	err := f.recv[0]
	f.recv = f.recv[1:]
	return err
}

func (f *fakeStream) SendMsg(any) error {
	err := f.send[0]
	f.send = f.send[1:]
	return err
}

func TestWatchedStreamFailedWith(t *testing.T) {
	tooBig := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (1027 vs. 64)")
	tests := []struct {
		name       string
		recv, send []error
		returned   error
		want       bool
	}{
		{"no failure, own overload", []error{nil}, []error{nil}, status.Error(codes.ResourceExhausted, "busy"), false},
		{"no failure, OK", []error{nil}, []error{nil}, nil, false},
		{"end of the stream is no failure", []error{io.EOF}, nil, status.Error(codes.ResourceExhausted, "busy"), false},
		{"receive failure passed on", []error{tooBig}, nil, tooBig, true},
		{"receive failure wrapped", []error{tooBig}, nil, fmt.Errorf("reading: %w", tooBig), true},
		{"receive failure remade", []error{tooBig}, nil, status.Error(codes.ResourceExhausted, "request too large"), true},
		{"receive failure turned into another code", []error{tooBig}, nil, status.Error(codes.Unavailable, "try later"), false},
		{"send failure passed on", nil, []error{tooBig}, tooBig, true},
		{"send failure, then a send that worked", nil, []error{tooBig, nil}, status.Error(codes.ResourceExhausted, "busy"), false},
		{"caller went away", []error{status.Error(codes.Canceled, "context canceled")}, nil, context.Canceled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &watchedStream{ServerStream: &fakeStream{recv: tt.recv, send: tt.send}}
			for range tt.recv {
				_ = w.RecvMsg(nil)
			}
			for range tt.send {
				_ = w.SendMsg(nil)
			}
			assert.Equal(t, tt.want, w.failedWith(tt.returned))
		})
	}
}
