package interceptor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

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
			key, err := IPKey{TrustedProxies: tt.trusted}.KeyFunc()
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

func TestIPKey(t *testing.T) {
	tcp := func(s string) context.Context {
		ap := netip.MustParseAddrPort(s)
		return peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(ap)})
	}
	withXFF := func(ctx context.Context, vals ...string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.MD{"x-forwarded-for": vals})
	}
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name string
		key  IPKey
		ctx  context.Context
		want string
	}{
		{"ipv4 whole", IPKey{}, tcp("192.0.2.9:1"), "192.0.2.9"},
		{"ipv4 /24", IPKey{IPv4Prefix: 24}, tcp("192.0.2.9:1"), "192.0.2.0/24"},
		{"ipv6 /64 by default", IPKey{}, tcp("[2001:db8:1:2:3:4:5:6]:1"), "2001:db8:1:2::/64"},
		{"ipv6 same /64", IPKey{}, tcp("[2001:db8:1:2::ffff]:1"), "2001:db8:1:2::/64"},
		{"ipv6 /48", IPKey{IPv6Prefix: 48}, tcp("[2001:db8:1:2::1]:1"), "2001:db8:1::/48"},
		{"ipv6 whole", IPKey{IPv6Prefix: 128}, tcp("[2001:db8::1]:1"), "2001:db8::1"},
		{"ipv4-mapped is ipv4", IPKey{IPv4Prefix: 24}, tcp("[::ffff:192.0.2.9]:1"), "192.0.2.0/24"},
		{"untrusted peer: header ignored", IPKey{TrustedProxies: proxies},
			withXFF(tcp("192.0.2.9:1"), "198.51.100.1"), "192.0.2.9"},
		{"no proxies: header ignored", IPKey{},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1"), "10.0.0.1"},
		{"trusted peer: rightmost untrusted", IPKey{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "6.6.6.6, 198.51.100.1"), "198.51.100.1"},
		{"trusted hops skipped, across values", IPKey{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "6.6.6.6, 198.51.100.1", "10.1.1.1,10.2.2.2"), "198.51.100.1"},
		{"client-written trusted-looking entries are passed over only while trusted", IPKey{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "10.3.3.3, 198.51.100.1, 10.2.2.2"), "198.51.100.1"},
		{"only trusted hops: leftmost", IPKey{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "10.2.2.2"), "10.2.2.2"},
		{"ipv4-mapped proxy network", IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1"), "198.51.100.1"},
		{"no header: the proxy", IPKey{TrustedProxies: proxies}, tcp("10.0.0.1:1"), "10.0.0.1"},
		{"garbage stops at the last trusted hop", IPKey{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1, garbage, 10.2.2.2"), "10.2.2.2"},
		{"entries with ports and ipv6", IPKey{TrustedProxies: proxies},
			withXFF(tcp("[fd00::1]:1"), "[2001:db8::7]:443, 10.2.2.2:80"), "2001:db8::/64"},
		{"empty entries skipped", IPKey{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1, ,", ""), "198.51.100.1"},
		{"other header", IPKey{TrustedProxies: proxies, Header: "X-Real-Ip"},
			metadata.NewIncomingContext(tcp("10.0.0.1:1"), metadata.Pairs("x-real-ip", "198.51.100.1", "x-forwarded-for", "6.6.6.6")), "198.51.100.1"},
		{"no peer", IPKey{}, context.Background(), ""},
		{"unix socket", IPKey{TrustedProxies: proxies},
			withXFF(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/run/s", Net: "unix"}}), "198.51.100.1"), "/run/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := tt.key.KeyFunc()
			require.NoError(t, err)
			assert.Equal(t, tt.want, f(tt.ctx, unaryMethod))
		})
	}
}

func TestIPKeyErrors(t *testing.T) {
	tests := []struct {
		name string
		key  IPKey
		want string
	}{
		{"prefixes", IPKey{IPv4Prefix: 33, IPv6Prefix: -1},
			"interceptor: IPKey: IPv4Prefix is 33, must be in [1, 32] (0 for 32); IPv6Prefix is -1, must be in [1, 128] (0 for 64)"},
		{"invalid network", IPKey{TrustedProxies: []netip.Prefix{{}}},
			"interceptor: IPKey: TrustedProxies[0] is not a valid network; parse it with netip.ParsePrefix"},
		{"header without proxies", IPKey{Header: "x-forwarded-for"},
			`interceptor: IPKey: Header is "x-forwarded-for" but TrustedProxies is empty: a header is only believed from a trusted proxy`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.key.KeyFunc()
			assert.EqualError(t, err, tt.want)
		})
	}
}

func TestPeerIdentity(t *testing.T) {
	verified := func(c *x509.Certificate) context.Context {
		info := credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{c},
			VerifiedChains:   [][]*x509.Certificate{{c}},
		}}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
	}
	spiffe, _ := url.Parse("spiffe://example.org/billing")
	full := &x509.Certificate{
		URIs:     []*url.URL{spiffe},
		DNSNames: []string{"billing.example.org"},
		Subject:  pkix.Name{CommonName: "billing", Organization: []string{"Example"}},
	}
	unverified := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{full}}}
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"uri SAN first", verified(full), "uri:spiffe://example.org/billing"},
		{"then DNS SAN", verified(&x509.Certificate{DNSNames: full.DNSNames, Subject: full.Subject}), "dns:billing.example.org"},
		{"then subject", verified(&x509.Certificate{Subject: full.Subject}), "subject:CN=billing,O=Example"},
		{"a certificate naming no one", verified(&x509.Certificate{}), ""},
		{"not verified", peer.NewContext(context.Background(), &peer.Peer{AuthInfo: unverified}), ""},
		{"no TLS", peer.NewContext(context.Background(), &peer.Peer{}), ""},
		{"no peer", context.Background(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, PeerIdentity(tt.ctx, unaryMethod))
		})
	}
}

// TestUnauthenticatedShareOneQuota: calls without a verified certificate
// share the quota of one caller, and spend no authenticated caller's.
func TestUnauthenticatedShareOneQuota(t *testing.T) {
	s, err := NewServer(callerRateLimit(PeerIdentity, RateLimit{PerSecond: 0.001, Burst: 2}, 0))
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
