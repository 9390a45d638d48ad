package interceptor_test

import (
	"context"
	"errors"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/limiter"
)

// The README's quick start: one line on the server, one on the client.
func Example_quickStart() {
	target := "dns:///orders.internal:443"
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())

	limits, err := interceptor.NewServer() // adaptive limit per method
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(limits.ServerOptions()...)

	client, err := interceptor.NewClient() // clients back off when pushed back
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(client.DialOptions(), creds)...)

	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	srv.Stop()
}

// The README's per-method limits, queues and exemptions.
func Example_perMethod() {
	limits, err := interceptor.NewServer(
		interceptor.WithMethod("/shop.v1.Reports/Generate", interceptor.Limit{
			Algorithm: limiter.FixedConfig{Limit: 4}, Queue: limiter.Queue{Size: 8},
		}),
		interceptor.WithMethod("/shop.v1.Orders/", interceptor.Limit{}), // one limiter for the service
		interceptor.WithExempt("/shop.v1.Admin/"),
	)

	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(limits.ServerOptions()...)
}

// The README's limiter on its own, around a call that is not gRPC.
func Example_limiterAlone() {
	errOverloaded := errors.New("overloaded")
	callTheDatabase := func(context.Context) error { return nil }
	ctx := context.Background()
	handle := func() error {
		l, err := limiter.New()
		if err != nil {
			return err
		}
		tok, ok := l.TryAcquire()
		if !ok {
			return errOverloaded
		}
		err = callTheDatabase(ctx)
		tok.Release(limiter.Success) // or limiter.Dropped on overload

		return err
	}
	_ = handle()
}

// The README's load reports for weighted_round_robin.
func Example_loadReports() {
	target := "dns:///orders.internal:443"
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())

	limits, err := interceptor.NewServer(interceptor.WithLoadReports())
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(limits.ServerOptions()...)

	conn, err := grpc.NewClient(target, creds, grpc.WithDefaultServiceConfig(
		`{"loadBalancingConfig":[{"weighted_round_robin":{}}]}`))

	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	srv.Stop()
}

// The README's dry run.
func Example_dryRun() {
	limits, err := interceptor.NewServer(interceptor.WithDryRun()) // or Limit{DryRun: true} per method

	if err != nil {
		log.Fatal(err)
	}
	_ = grpc.NewServer(limits.ServerOptions()...)
}
