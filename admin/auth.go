package admin

import (
	"context"
	"crypto/x509"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// An Authorizer decides whether the caller of fullMethod (such as
// "/sluice.v1.LimitsService/SetOverride") may use the service, from what
// ctx carries: the peer (grpc/peer, with its credentials.AuthInfo) and the
// metadata. It returns who the caller is, for the audit log, or an error
// that refuses the call: a status error is returned to the caller as it
// is, anything else as PERMISSION_DENIED.
//
// Never trust the peer's IP address, loopback included: proxies and
// service mesh sidecars forward remote traffic from local addresses.
type Authorizer func(ctx context.Context, fullMethod string) (caller string, err error)

// errNoAuthorizer is what every call of a service without an authorizer
// gets, and what Register says without one.
const errNoAuthorizer = "admin: the limits service admits no one until told who may use it: " +
	"register it with admin.Register and WithTLSClients, WithUnixSocketPeers or WithAuthorizer"

func tlsClients(names map[string]bool) Authorizer {
	return func(ctx context.Context, _ string) (string, error) {
		p, _ := peer.FromContext(ctx)
		var info credentials.TLSInfo
		if p != nil {
			info, _ = p.AuthInfo.(credentials.TLSInfo)
		}
		chains := info.State.VerifiedChains
		if len(chains) == 0 || len(chains[0]) == 0 {
			return "", status.Error(codes.Unauthenticated, "admin: the caller has no verified TLS client certificate; "+
				"serve the limits service over TLS with ClientAuth tls.RequireAndVerifyClientCert and connect with an operator certificate")
		}
		leaf := chains[0][0]
		for _, n := range sanNames(leaf) {
			if names[n] {
				return n, nil
			}
		}
		return "", status.Errorf(codes.PermissionDenied, "admin: client certificate %q has none of the names WithTLSClients admits", leaf.Subject.String())
	}
}

// sanNames lists the subject alternative names of c that can identify an
// operator.
func sanNames(c *x509.Certificate) []string {
	names := append([]string(nil), c.DNSNames...)
	for _, u := range c.URIs {
		names = append(names, u.String())
	}
	return append(names, c.EmailAddresses...)
}

func unixSocketPeers(ctx context.Context, _ string) (string, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if _, ok := p.Addr.(*net.UnixAddr); ok {
			name := "unix socket"
			if p.LocalAddr != nil {
				name += " " + p.LocalAddr.String()
			}
			return name, nil
		}
	}
	return "", status.Error(codes.PermissionDenied, "admin: only callers on a Unix socket are admitted (WithUnixSocketPeers)")
}
