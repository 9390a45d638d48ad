package admin_test

import (
	"context"
	"errors"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/interceptor"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// The admin service on a separate, internal server, guarded by a token.
func ExampleNewService() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	public := grpc.NewServer(limits.ServerOptions()...)
	// Register the application's services on public.

	operatorOnly := func(ctx context.Context, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-operator-token"); len(v) == 1 && v[0] == "from-your-secret-store" {
			return nil
		}
		return errors.New("operators only")
	}
	svc, err := admin.NewService(limits, admin.WithAuthorizer(operatorOnly))
	if err != nil {
		log.Fatal(err)
	}
	internal := grpc.NewServer()
	sluicev1.RegisterLimitsServiceServer(internal, svc)
	// Serve public on the public listener, internal on an internal one.
	public.Stop()
	internal.Stop()
	_ = limits.Close()
	// Output:
}
