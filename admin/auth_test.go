package admin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/interceptor"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// logged is one record: its level, message and attributes as text.
type logged struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// at or above Info: the audit log, without the debug records.
func (r *recorder) audit() []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logged
	for _, rec := range r.recs {
		if rec.Level < slog.LevelInfo {
			continue
		}
		l := logged{Level: rec.Level, Msg: rec.Message, Attrs: map[string]string{}}
		rec.Attrs(func(a slog.Attr) bool { l.Attrs[a.Key] = a.Value.String(); return true })
		out = append(out, l)
	}
	return out
}

// serve serves svc on lis until the test ends.
func serve(t *testing.T, svc *service, lis net.Listener, opts ...grpc.ServerOption) {
	t.Helper()
	gs := grpc.NewServer(opts...)
	sluicev1.RegisterLimitsServiceServer(gs, svc)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	t.Cleanup(func() { gs.Stop(); wg.Wait() })
}

func dial(t *testing.T, target string, creds credentials.TransportCredentials) sluicev1.LimitsServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, conn.Close()) })
	return sluicev1.NewLimitsServiceClient(conn)
}

func TestAuditLog(t *testing.T) {
	rec := &recorder{}
	byHeader := func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-operator"); len(v) == 1 && v[0] == "alice" {
			return "alice", nil
		}
		return "", status.Error(codes.Unauthenticated, "who are you?")
	}
	c := start(t, WithAuthorizer(byHeader), WithLogger(slog.New(rec)))
	alice := metadata.AppendToOutgoingContext(t.Context(), "x-operator", "alice")

	_, err := c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 0, Ttl: durationpb.New(24 * time.Hour)})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.Equal(t, "who are you?", status.Convert(err).Message())
	_, err = c.SetOverride(alice, &sluicev1.SetOverrideRequest{Name: unaryLimiter, Limit: 1, Ttl: durationpb.New(time.Hour)})
	require.NoError(t, err)
	_, err = c.SetOverride(alice, &sluicev1.SetOverrideRequest{Name: "nope", Limit: 1, Ttl: durationpb.New(time.Hour)})
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, err = c.ClearOverride(alice, &sluicev1.ClearOverrideRequest{Name: unaryLimiter})
	require.NoError(t, err)
	_, err = c.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: unaryLimiter})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))

	got := rec.audit()
	require.Len(t, got, 5)
	for i := range got {
		assert.Contains(t, got[i].Attrs["peer"], "127.0.0.1:", "record %d", i)
		delete(got[i].Attrs, "peer")
	}
	assert.Equal(t, []logged{
		{slog.LevelWarn, "sluice admin: call refused", map[string]string{
			"method": "/sluice.v1.LimitsService/SetOverride", "limiter": unaryLimiter, "limit": "0", "ttl": "24h0m0s", "error": "who are you?"}},
		{slog.LevelInfo, "sluice admin: limit overridden", map[string]string{
			"caller": "alice", "limiter": unaryLimiter, "limit": "1", "ttl": "1h0m0s"}},
		{slog.LevelWarn, "sluice admin: override failed", map[string]string{
			"caller": "alice", "limiter": "nope", "limit": "1", "ttl": "1h0m0s", "error": `interceptor: no limiter of that name: "nope"`}},
		{slog.LevelInfo, "sluice admin: override cleared", map[string]string{
			"caller": "alice", "limiter": unaryLimiter}},
		{slog.LevelWarn, "sluice admin: call refused", map[string]string{
			"method": "/sluice.v1.LimitsService/ClearOverride", "limiter": unaryLimiter, "error": "who are you?"}},
	}, got)
}

func TestZeroServiceRefusesAll(t *testing.T) {
	rec := &recorder{}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	defer slog.SetDefault(old)
	for _, svc := range []*service{nil, {}} {
		_, err := svc.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
		assert.Equal(t, codes.PermissionDenied, status.Code(err))
		assert.Equal(t, errNoAuthorizer, status.Convert(err).Message())
		_, err = svc.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: "x", Ttl: durationpb.New(time.Hour)})
		assert.Equal(t, codes.PermissionDenied, status.Code(err))
		_, err = svc.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: "x"})
		assert.Equal(t, codes.PermissionDenied, status.Code(err))
	}
	assert.Len(t, rec.audit(), 6, "refusals go to slog.Default()")
}

func TestBuiltinAuthorizers(t *testing.T) {
	ca := newCA(t)
	ops := ca.leaf(t, "ops", []string{"ops.example.com"}, nil)
	other := ca.leaf(t, "intruder", []string{"intruder.example.com"}, []string{"spiffe://example.com/intruder"})
	spiffe := ca.leaf(t, "", nil, []string{"spiffe://example.com/ops"})
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	unix := &net.UnixAddr{Name: "@", Net: "unix"}
	ctxOf := func(addr net.Addr, auth credentials.AuthInfo) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: addr, LocalAddr: &net.UnixAddr{Name: "/run/sluice/admin.sock", Net: "unix"}, AuthInfo: auth})
	}
	verified := func(c *x509.Certificate) credentials.AuthInfo {
		var info credentials.TLSInfo
		info.State.PeerCertificates = []*x509.Certificate{c}
		info.State.VerifiedChains = [][]*x509.Certificate{{c, ca.cert}}
		return info
	}
	unverified := func(c *x509.Certificate) credentials.AuthInfo {
		var info credentials.TLSInfo
		info.State.PeerCertificates = []*x509.Certificate{c}
		return info
	}
	tlsAuth := tlsClients(map[string]bool{"ops.example.com": true, "spiffe://example.com/ops": true})
	tests := []struct {
		name   string
		auth   Authorizer
		ctx    context.Context
		caller string
		code   codes.Code
	}{
		{"tls: no peer", tlsAuth, context.Background(), "", codes.Unauthenticated},
		{"tls: mesh loopback, no credentials", tlsAuth, ctxOf(tcp("127.0.0.6"), nil), "", codes.Unauthenticated},
		{"tls: ipv6 loopback, no credentials", tlsAuth, ctxOf(tcp("::1"), nil), "", codes.Unauthenticated},
		{"tls: unverified certificate", tlsAuth, ctxOf(tcp("10.0.0.7"), unverified(ops)), "", codes.Unauthenticated},
		{"tls: unlisted name", tlsAuth, ctxOf(tcp("10.0.0.7"), verified(other)), "", codes.PermissionDenied},
		{"tls: listed DNS name", tlsAuth, ctxOf(tcp("10.0.0.7"), verified(ops)), "ops.example.com", codes.OK},
		{"tls: listed URI", tlsAuth, ctxOf(tcp("10.0.0.7"), verified(spiffe)), "spiffe://example.com/ops", codes.OK},
		{"unix: no peer", unixSocketPeers, context.Background(), "", codes.PermissionDenied},
		{"unix: mesh loopback", unixSocketPeers, ctxOf(tcp("127.0.0.6"), nil), "", codes.PermissionDenied},
		{"unix: loopback", unixSocketPeers, ctxOf(tcp("127.0.0.1"), nil), "", codes.PermissionDenied},
		{"unix: socket", unixSocketPeers, ctxOf(unix, nil), "unix socket /run/sluice/admin.sock", codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caller, err := tt.auth(tt.ctx, "/sluice.v1.LimitsService/SetOverride")
			assert.Equal(t, tt.code, status.Code(err), "%v", err)
			assert.Equal(t, tt.caller, caller)
		})
	}
}

// Over real mTLS: only verified certificates with a listed name get in,
// and the log names the certificate.
func TestTLSClients(t *testing.T) {
	ca := newCA(t)
	serverCert := ca.keyPair(t, ca.issue(t, "server", x509.ExtKeyUsageServerAuth, nil, nil, []net.IP{net.ParseIP("127.0.0.1")}))
	rec := &recorder{}
	limits, err := interceptor.NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, limits.Close()) }()
	svc, err := newService(limits, WithTLSClients("ops.example.com"), WithLogger(slog.New(rec)))
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serve(t, svc, lis, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    ca.pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven, // so callers without a certificate reach the service
	})))

	client := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: ca.pool(), Certificates: certs, ServerName: "127.0.0.1"})
	}
	tests := []struct {
		name  string
		creds credentials.TransportCredentials
		code  codes.Code
	}{
		{"no client certificate", client(), codes.Unauthenticated},
		{"unlisted name", client(ca.keyPair(t, ca.issue(t, "x", x509.ExtKeyUsageClientAuth, []string{"intruder.example.com"}, nil, nil))), codes.PermissionDenied},
		{"operator", client(ca.keyPair(t, ca.issue(t, "x", x509.ExtKeyUsageClientAuth, []string{"ops.example.com"}, nil, nil))), codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, lis.Addr().String(), tt.creds)
			_, err := c.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
			if tt.code == codes.NotFound {
				assert.NoError(t, err)
			} else {
				assert.Equal(t, tt.code, status.Code(err), "%v", err)
			}
			_, err = c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: "x", Limit: 0, Ttl: durationpb.New(time.Hour)})
			assert.Equal(t, tt.code, status.Code(err), "%v", err)
		})
	}
	got := rec.audit()
	require.Len(t, got, 5, "four refusals and the operator's override")
	assert.Equal(t, "sluice admin: override failed", got[4].Msg)
	assert.Equal(t, "ops.example.com", got[4].Attrs["caller"])
}

// Over a real Unix socket, and refused over loopback TCP on the same
// server.
func TestUnixSocketPeers(t *testing.T) {
	dir, err := os.MkdirTemp("", "sluice") // short: socket paths are limited to about 100 bytes
	require.NoError(t, err)
	defer func() { assert.NoError(t, os.RemoveAll(dir)) }()
	sock := filepath.Join(dir, "admin.sock")
	rec := &recorder{}
	limits, err := interceptor.NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, limits.Close()) }()
	svc, err := newService(limits, WithUnixSocketPeers(), WithLogger(slog.New(rec)))
	require.NoError(t, err)
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	serve(t, svc, ul)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serve(t, svc, tl)

	_, err = dial(t, "unix://"+sock, insecure.NewCredentials()).ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	assert.NoError(t, err)
	_, err = dial(t, tl.Addr().String(), insecure.NewCredentials()).ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	_, err = dial(t, "unix://"+sock, insecure.NewCredentials()).ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: "x"})
	assert.Equal(t, codes.NotFound, status.Code(err))
	got := rec.audit()
	require.Len(t, got, 2)
	assert.Equal(t, "sluice admin: call refused", got[0].Msg)
	assert.Equal(t, "unix socket "+sock, got[1].Attrs["caller"])
}

// ca is a throwaway certificate authority.
type ca struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

func newCA(t *testing.T) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &ca{cert: cert, key: key, serial: 1}
}

func (c *ca) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

type issued struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (c *ca) issue(t *testing.T, cn string, use x509.ExtKeyUsage, dns, uris []string, ips []net.IP) issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	c.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{use},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		require.NoError(t, err)
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return issued{cert: cert, key: key}
}

func (c *ca) leaf(t *testing.T, cn string, dns, uris []string) *x509.Certificate {
	return c.issue(t, cn, x509.ExtKeyUsageClientAuth, dns, uris, nil).cert
}

func (c *ca) keyPair(t *testing.T, i issued) tls.Certificate {
	t.Helper()
	return tls.Certificate{Certificate: [][]byte{i.cert.Raw}, PrivateKey: i.key, Leaf: i.cert}
}
