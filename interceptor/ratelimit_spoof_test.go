package interceptor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// TestForwardedForSpoofing is the attack on a quota keyed by
// X-Forwarded-For: one client writes a new address into the header on
// every call. With a quota of one call per caller, at most one of its
// calls may pass.
//
// The loopback client is either a direct caller (not trusted: its header
// is ignored) or, when loopback is trusted, a proxy that appended the
// address it saw, 203.0.113.7, after whatever the client wrote.
func TestForwardedForSpoofing(t *testing.T) {
	tests := []struct {
		name    string
		trusted []netip.Prefix
		xff     func(i int) []string
	}{
		{"direct caller", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			func(i int) []string { return []string{"198.51.100." + strconv.Itoa(i)} }},
		{"behind a trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
			func(i int) []string {
				return []string{"198.51.100." + strconv.Itoa(i) + ", 192.0.2.1", "203.0.113.7"}
			}},
		{"behind two trusted proxies", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.0.0.0/8")},
			func(i int) []string { return []string{"198.51.100." + strconv.Itoa(i) + ", 203.0.113.7, 10.9.9.9"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := callerkey.IP{TrustedProxies: tt.trusted}.Func()
			require.NoError(t, err)
			e := newEnv(t, &testpb.Service{}, envConfig{
				server:   []ServerOption{callerRateLimit(key, RateLimit{PerSecond: 0.001, Burst: 1}, 0)},
				noClient: true,
			})
			passed := 0
			for i := range 100 {
				md := metadata.MD{"x-forwarded-for": tt.xff(i)}
				ctx := metadata.NewOutgoingContext(t.Context(), md)
				_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
				if status.Code(err) == codes.OK {
					passed++
					e.awaitRelease(t, "server")
				} else {
					e.awaitRejection(t, "server:caller_rate")
				}
			}
			assert.Equal(t, 1, passed, "calls through a quota of 1")
		})
	}
}

// TestUnauthenticatedShareOneQuota: calls without a verified certificate
// share the quota of one caller, and spend no authenticated caller's.
func TestUnauthenticatedShareOneQuota(t *testing.T) {
	s, err := NewServer(callerRateLimit(callerkey.PeerIdentity, RateLimit{PerSecond: 0.001, Burst: 2}, 0))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	r := s.tab.Load().lookup(unaryMethod)
	anon := func(port int) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, byte(port)), Port: port}})
	}
	admitted := 0
	for i := range 10 {
		if _, rej := s.checkRates(anon(i), r); rej == nil {
			admitted++
		}
	}
	assert.Equal(t, 2, admitted, "ten unauthenticated callers share one burst of 2")
	c := &x509.Certificate{DNSNames: []string{"a.example.org"}}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}}})
	_, rej := s.checkRates(ctx, r)
	assert.Nil(t, rej, "an authenticated caller keeps its own quota")
}
