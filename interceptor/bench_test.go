package interceptor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// BenchmarkUnaryOverhead measures what sluice's server and client
// interceptors add to a unary call over bufconn, below the limit, with
// the default configuration and the global (no-op) meter provider.
func BenchmarkUnaryOverhead(b *testing.B) {
	for _, bc := range []struct {
		name   string
		sluice bool
	}{{"bare", false}, {"sluice", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var sopts []grpc.ServerOption
			var dopts []grpc.DialOption
			if bc.sluice {
				s, err := NewServer()
				require.NoError(b, err)
				sopts = s.ServerOptions()
				c, err := NewClient()
				require.NoError(b, err)
				dopts = c.DialOptions()
			}
			client, stop := bufconnService(b, sopts, dopts)
			defer stop()
			ctx := context.Background()
			req := &testpb.UnaryRequest{Payload: "x"}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Unary(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func bufconnService(b *testing.B, sopts []grpc.ServerOption, dopts []grpc.DialOption) (testpb.TestServiceClient, func()) {
	b.Helper()
	client, stop, err := testpb.ServeBufconn(&testpb.Service{}, sopts, dopts)
	require.NoError(b, err)
	return client, stop
}

// BenchmarkUnaryServerInterceptor calls the server interceptor directly
// around a handler that returns at once: the interceptor's own cost per
// call (lookup, permit, clock reads, release, no-op metrics), without the
// transport that dominates BenchmarkUnaryOverhead.
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	s, err := NewServer()
	require.NoError(b, err)
	defer s.Close()
	intercept := s.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: testpb.TestService_Unary_FullMethodName}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := intercept(ctx, nil, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
