package callerkey

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/netip"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIP(t *testing.T) {
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
		key  IP
		ctx  context.Context
		want string
	}{
		{"ipv4 whole", IP{}, tcp("192.0.2.9:1"), "192.0.2.9"},
		{"ipv4 /24", IP{IPv4Prefix: 24}, tcp("192.0.2.9:1"), "192.0.2.0/24"},
		{"ipv6 /64 by default", IP{}, tcp("[2001:db8:1:2:3:4:5:6]:1"), "2001:db8:1:2::/64"},
		{"ipv6 same /64", IP{}, tcp("[2001:db8:1:2::ffff]:1"), "2001:db8:1:2::/64"},
		{"ipv6 /48", IP{IPv6Prefix: 48}, tcp("[2001:db8:1:2::1]:1"), "2001:db8:1::/48"},
		{"ipv6 whole", IP{IPv6Prefix: 128}, tcp("[2001:db8::1]:1"), "2001:db8::1"},
		{"ipv4-mapped is ipv4", IP{IPv4Prefix: 24}, tcp("[::ffff:192.0.2.9]:1"), "192.0.2.0/24"},
		{"untrusted peer: header ignored", IP{TrustedProxies: proxies},
			withXFF(tcp("192.0.2.9:1"), "198.51.100.1"), "192.0.2.9"},
		{"no proxies: header ignored", IP{},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1"), "10.0.0.1"},
		{"trusted peer: rightmost untrusted", IP{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "6.6.6.6, 198.51.100.1"), "198.51.100.1"},
		{"trusted hops skipped, across values", IP{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "6.6.6.6, 198.51.100.1", "10.1.1.1,10.2.2.2"), "198.51.100.1"},
		{"client-written trusted-looking entries are passed over only while trusted", IP{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "10.3.3.3, 198.51.100.1, 10.2.2.2"), "198.51.100.1"},
		{"only trusted hops: leftmost", IP{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "10.2.2.2"), "10.2.2.2"},
		{"ipv4-mapped proxy network", IP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1"), "198.51.100.1"},
		{"no header: the proxy", IP{TrustedProxies: proxies}, tcp("10.0.0.1:1"), "10.0.0.1"},
		{"garbage stops at the last trusted hop", IP{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1, garbage, 10.2.2.2"), "10.2.2.2"},
		{"entries with ports and ipv6", IP{TrustedProxies: proxies},
			withXFF(tcp("[fd00::1]:1"), "[2001:db8::7]:443, 10.2.2.2:80"), "2001:db8::/64"},
		{"empty entries skipped", IP{TrustedProxies: proxies},
			withXFF(tcp("10.0.0.1:1"), "198.51.100.1, ,", ""), "198.51.100.1"},
		{"other header", IP{TrustedProxies: proxies, Header: "X-Real-Ip"},
			metadata.NewIncomingContext(tcp("10.0.0.1:1"), metadata.Pairs("x-real-ip", "198.51.100.1", "x-forwarded-for", "6.6.6.6")), "198.51.100.1"},
		{"no peer", IP{}, context.Background(), ""},
		{"unix socket", IP{TrustedProxies: proxies},
			withXFF(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.UnixAddr{Name: "/run/s", Net: "unix"}}), "198.51.100.1"), "/run/s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := tt.key.Func()
			require.NoError(t, err)
			assert.Equal(t, tt.want, f(tt.ctx, "/pkg.Svc/Method"))
		})
	}
}

func TestIPErrors(t *testing.T) {
	tests := []struct {
		name string
		key  IP
		want string
	}{
		{"prefixes", IP{IPv4Prefix: 33, IPv6Prefix: -1},
			"callerkey: IP: IPv4Prefix is 33, must be in [1, 32] (0 for 32); IPv6Prefix is -1, must be in [1, 128] (0 for 64)"},
		{"invalid network", IP{TrustedProxies: []netip.Prefix{{}}},
			"callerkey: IP: TrustedProxies[0] is not a valid network; parse it with netip.ParsePrefix"},
		{"header without proxies", IP{Header: "x-forwarded-for"},
			`callerkey: IP: Header is "x-forwarded-for" but TrustedProxies is empty: a header is only believed from a trusted proxy`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.key.Func()
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
			assert.Equal(t, tt.want, PeerIdentity(tt.ctx, "/pkg.Svc/Method"))
		})
	}
}
