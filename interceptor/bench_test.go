package interceptor

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluice-go/sluice/internal/testpb"
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
			dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if bc.sluice {
				s, err := ServerOptions()
				require.NoError(b, err)
				sopts = s
				d, err := DialOptions()
				require.NoError(b, err)
				dopts = append(dopts, d...)
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
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(sopts...)
	testpb.RegisterTestServiceServer(srv, &testpb.Service{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	dopts = append(dopts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}))
	conn, err := grpc.NewClient("passthrough:///bufconn", dopts...)
	require.NoError(b, err)
	return testpb.NewTestServiceClient(conn), func() {
		_ = conn.Close()
		srv.Stop()
		wg.Wait()
	}
}
