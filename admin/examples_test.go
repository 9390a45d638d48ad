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
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/admin"
	"github.com/sluice-go/sluice/interceptor"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// The admin service on a separate, internal server, open only to clients
// with an operator certificate from the company CA.
func ExampleRegister() {
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
	internal := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsConfig)))
	err = admin.Register(internal, limits,
		admin.WithTLSClients("spiffe://example.com/ops/oncall", "sre-bot.example.com"),
		admin.WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, nil))), // the audit log
	)
	if err != nil {
		log.Fatal(err)
	}
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
	internal := grpc.NewServer() // over TLS in production: the token must not travel in clear
	if err := admin.Register(internal, limits, admin.WithAuthorizer(operatorToken)); err != nil {
		log.Fatal(err)
	}
	internal.Stop()
	_ = limits.Close()
	// Output:
}

// Without an authorizer there is no service: nothing is trusted for its
// address alone, loopback included.
func ExampleRegister_closed() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	defer limits.Close()
	err = admin.Register(grpc.NewServer(), limits)
	fmt.Println(err)
	// Output:
	// admin: the limits service admits no one until told who may use it: register it with admin.Register and WithTLSClients, WithUnixSocketPeers or WithAuthorizer
}

// The README's path: the admin service on a Unix socket that only
// operators can reach, with reflection so that grpcurl can call it, and
// CheckRegistered so that every method's limiter is listed from the start
// (and a configured name the server does not serve is an error).
func ExampleWithUnixSocketPeers() {
	limits, err := interceptor.NewServer() // not ServerOptions(): the admin service needs the *Server
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(limits.ServerOptions()...)
	testpb.RegisterTestServiceServer(srv, &testpb.Service{}) // every service, then:
	if err := limits.CheckRegistered(srv); err != nil {
		log.Fatal(err)
	}

	ops := grpc.NewServer()
	if err := admin.Register(ops, limits, admin.WithUnixSocketPeers()); err != nil {
		log.Fatal(err)
	}
	reflection.Register(ops) // for grpcurl
	// In production, a directory only operators can reach.
	dir, err := os.MkdirTemp("", "sluice-admin")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "admin.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = ops.Serve(lis); close(done) }()

	// What grpcurl -plaintext -unix admin.sock sluice.v1.LimitsService/ListLimits
	// and .../SetOverride do:
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	client := sluicev1.NewLimitsServiceClient(conn)
	list, err := client.ListLimits(context.Background(), &sluicev1.ListLimitsRequest{})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range list.GetLimiters() {
		fmt.Println(l.GetName())
	}
	set, err := client.SetOverride(context.Background(), &sluicev1.SetOverrideRequest{
		Name: "/sluice.test.v1.TestService/Unary", Limit: 2, Ttl: durationpb.New(10 * time.Minute)}) // with or without the leading '/'
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(set.GetLimiter().GetName(), set.GetLimiter().GetLimit())

	_ = conn.Close()
	ops.Stop()
	<-done
	srv.Stop()
	_ = limits.Close()
	// Output:
	// sluice.test.v1.TestService/Bidi
	// sluice.test.v1.TestService/ClientStream
	// sluice.test.v1.TestService/ServerStream
	// sluice.test.v1.TestService/Unary
	// sluice.test.v1.TestService/Unary 2
}

// The README's admin service: on a Unix socket, beside reflection.
func ExampleRegister_unixSocket() {
	limits, err := interceptor.NewServer()
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(limits.ServerOptions()...)
	// register every service on srv, then:
	if err := limits.CheckRegistered(srv); err != nil {
		log.Fatal(err) // a configured method or service this server does not serve
	}

	ops := grpc.NewServer()
	if err := admin.Register(ops, limits, admin.WithUnixSocketPeers()); err != nil {
		log.Fatal(err)
	}
	reflection.Register(ops)                                      // google.golang.org/grpc/reflection, for grpcurl
	lis, err := net.Listen("unix", "/run/shop/sluice-admin.sock") // a directory only operators can reach
	if err != nil {
		log.Fatal(err)
	}
	go ops.Serve(lis)

	defer ops.Stop()
	srv.Stop()
}
