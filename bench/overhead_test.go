package bench

import (
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"google.golang.org/grpc"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// BenchmarkUnaryOverhead times one unary call of testpb's echo service
// over bufconn, one call at a time, well below every limit:
//
//	bare      no interceptors
//	sluice    interceptor.NewServer() and interceptor.NewClient(),
//	          with no options (the global, no-op meter provider)
//	failsafe  failsafegrpc's unary server and client interceptors, each
//	          with its own adaptivelimiter.NewWithDefaults
//
// Both libraries limit each side of the call, so both sides are
// installed. The difference with bare is what a library adds to a call
// that it admits; the call itself (HTTP/2 framing, protobuf, the in-memory
// pipe) is most of the time. The interceptor package has the same
// benchmark for bare and sluice alone.
func BenchmarkUnaryOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts func(b *testing.B) ([]grpc.ServerOption, []grpc.DialOption)
	}{
		{"bare", func(*testing.B) ([]grpc.ServerOption, []grpc.DialOption) { return nil, nil }},
		{"sluice", sluiceOptions},
		{"failsafe", failsafeOptions},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sopts, dopts := bc.opts(b)
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

func sluiceOptions(b *testing.B) ([]grpc.ServerOption, []grpc.DialOption) {
	limits, err := interceptor.NewServer()
	if err != nil {
		b.Fatal(err)
	}
	client, err := interceptor.NewClient()
	if err != nil {
		b.Fatal(err)
	}
	return limits.ServerOptions(), client.DialOptions()
}

// failsafeOptions installs failsafe-go's interceptors the way its
// failsafegrpc package documents them, with an adaptive limiter of default
// settings on each side. The server side uses the unary interceptor rather
// than NewServerInHandle: the tap handle only checks that a permit is
// available and takes none, so its limiter would never see a call.
func failsafeOptions(*testing.B) ([]grpc.ServerOption, []grpc.DialOption) {
	srv := adaptivelimiter.NewWithDefaults[any]()
	cli := adaptivelimiter.NewWithDefaults[any]()
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(failsafegrpc.NewUnaryServerInterceptor[any](srv))},
		[]grpc.DialOption{grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor[any](cli))}
}

// bufconnService serves testpb.Service over an in-memory listener and
// returns a client of it, and a function that closes both.
func bufconnService(b *testing.B, sopts []grpc.ServerOption, dopts []grpc.DialOption) (testpb.TestServiceClient, func()) {
	b.Helper()
	client, stop, err := testpb.ServeBufconn(&testpb.Service{}, sopts, dopts)
	if err != nil {
		b.Fatal(err)
	}
	return client, stop
}
