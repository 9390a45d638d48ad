package testpb

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// ServeBufconn serves svc on an in-memory listener with sopts and returns
// a client connected with dopts, and a func that closes the connection
// and stops the server. Benchmarks use it to time a call without a network.
func ServeBufconn(svc TestServiceServer, sopts []grpc.ServerOption, dopts []grpc.DialOption) (TestServiceClient, func(), error) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(sopts...)
	RegisterTestServiceServer(srv, svc)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	stop := func() {
		srv.Stop()
		wg.Wait()
	}
	dopts = append(dopts,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	conn, err := grpc.NewClient("passthrough:///bufconn", dopts...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return NewTestServiceClient(conn), func() {
		_ = conn.Close()
		stop()
	}, nil
}
