package admin_test

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/interceptor"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// The admin service on a separate, internal server, open only to clients
// with an operator certificate from the company CA.
func ExampleNewService() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	public := grpc.NewServer(limits.ServerOptions()...)
	// Register the application's services on public.

	operatorCAs := x509.NewCertPool() // add the CA that issues operator certificates
	tlsConfig := &tls.Config{
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  operatorCAs,
		// Certificates: the server's own certificate.
	}
	svc, err := admin.NewService(limits,
		admin.WithTLSClients("spiffe://example.com/ops/oncall", "sre-bot.example.com"),
		admin.WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, nil))), // the audit log
	)
	if err != nil {
		log.Fatal(err)
	}
	internal := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsConfig)))
	sluicev1.RegisterLimitsServiceServer(internal, svc)
	// Serve public on the public listener, internal on an internal one.
	public.Stop()
	internal.Stop()
	_ = limits.Close()
	// Output:
}

// An Authorizer of your own, here a bearer token from a secret store, for
// a server that already authenticates its callers some other way.
func ExampleWithAuthorizer() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	token := []byte("from-your-secret-store")
	operatorToken := func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get("x-operator-token")
		if len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), token) == 1 {
			return "token holder", nil
		}
		return "", errors.New("operators only: send x-operator-token")
	}
	svc, err := admin.NewService(limits, admin.WithAuthorizer(operatorToken))
	if err != nil {
		log.Fatal(err)
	}
	internal := grpc.NewServer() // over TLS in production: the token must not travel in clear
	sluicev1.RegisterLimitsServiceServer(internal, svc)
	internal.Stop()
	_ = limits.Close()
	// Output:
}

// Without an authorizer there is no service: nothing is trusted for its
// address alone, loopback included.
func ExampleNewService_closed() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	_, err = admin.NewService(limits)
	fmt.Println(err)
	// Output:
	// admin: the limits service admits no one until told who may use it: create it with admin.NewService and WithTLSClients, WithUnixSocketPeers or WithAuthorizer
}
