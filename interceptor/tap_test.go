package interceptor

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// countingCodec is the proto codec counting the requests a server decodes.
type countingCodec struct {
	encoding.CodecV2
	decoded *atomic.Int64
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.decoded.Add(1)
	return c.CodecV2.Unmarshal(data, v)
}

// garbageCodec sends bytes that are not a valid UnaryRequest.
type garbageCodec struct{ encoding.CodecV2 }

func (garbageCodec) Marshal(any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer{0xff, 0xff, 0xff}}, nil
}

// TestEarlyRejection checks that with WithEarlyRejection a call over the
// limit is rejected before its request is decoded.
func TestEarlyRejection(t *testing.T) {
	var decoded atomic.Int64
	b := newBlock()
	svc := &testpb.Service{UnaryFunc: func(ctx context.Context, req *testpb.UnaryRequest) (*testpb.UnaryResponse, error) {
		if req.GetPayload() == "block" {
			return &testpb.UnaryResponse{}, b.wait(ctx)
		}
		return &testpb.UnaryResponse{}, nil
	}}
	codec := countingCodec{encoding.GetCodecV2(proto.Name), &decoded}
	e := newEnv(t, svc, envConfig{noClient: true,
		server:     []ServerOption{WithDefault(fixed(1)), WithEarlyRejection()},
		serverOpts: []grpc.ServerOption{grpc.ForceServerCodecV2(codec)}})

	// The first call makes the method's limiter; the tap knows it from
	// then on.
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	done := make(chan error, 1)
	go func() {
		_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: "block"})
		done <- err
	}()
	b.awaitEntered(t, 1)
	before := decoded.Load()
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{Payload: strings.Repeat("x", 64<<10)})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "concurrency limit 1 reached")
	assert.Equal(t, before, decoded.Load(), "the rejected request was decoded")
	e.awaitRejection(t, "server:limit")

	close(b.release)
	require.NoError(t, <-done)
	e.awaitRelease(t, "server")
	// Admitted by the tap, run by the interceptor: one permit, one release.
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	assert.Zero(t, gateOf(e.coreOf(e.srv), unaryMethod).lim.Inflight())
}

// TestEarlyPermitReleasedWithoutHandler checks that a permit the tap took
// comes back when the call never reaches the interceptor: here its request
// cannot be decoded.
func TestEarlyPermitReleasedWithoutHandler(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{noClient: true,
		server: []ServerOption{WithDefault(fixed(1)), WithEarlyRejection()}})
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")

	for range 3 {
		err := e.conn.Invoke(t.Context(), unaryMethod, &testpb.UnaryRequest{}, &testpb.UnaryResponse{},
			grpc.ForceCodecV2(garbageCodec{encoding.GetCodecV2(proto.Name)}))
		require.Equal(t, codes.Internal, status.Code(err), "%v", err)
		e.awaitRelease(t, "server")
	}
	// The limit of 1 is free again: nothing leaked.
	_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")
}
