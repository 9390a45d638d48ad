package callerkey

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// A Func names the caller of a call, for interceptor.WithCallerLimiter.
// Calls for which it returns "" share one quota: callers that cannot be
// told apart are limited together rather than not at all.
type Func func(ctx context.Context, fullMethod string) string

// Default prefix lengths of IP. One host has one IPv4 address, but is
// usually given a whole IPv6 /64: keyed by full address, one host would
// be 2^64 callers. A site usually holds a /48, 65,536 /64s: see IP.
const (
	defaultIPv4Prefix = 32
	defaultIPv6Prefix = 64
)

// defaultForwardedHeader is the header IP reads when it trusts proxies
// and no other is named.
const defaultForwardedHeader = "x-forwarded-for"

// An IP names callers by IP address, for interceptor.WithCallerLimiter: by the
// address of the connection, or behind proxies you run, by the address the
// nearest of them saw. Build its Func with Func.
//
// A header such as X-Forwarded-For is written by whoever sends the call:
// only the entries that your own proxies appended can be believed. IP
// therefore reads the header from the right, starting from the connection's
// address: while the address at hand belongs to a trusted proxy, it steps
// one entry to the left; the first address not trusted is the caller.
// A connection from an address not trusted is keyed by its own address and
// its header is ignored, whatever it says. An entry that is not an IP
// address stops the walk at the last trusted hop, which is then the key.
type IP struct {
	// IPv4Prefix and IPv6Prefix are how many leading bits of an address
	// name a caller: addresses that share them share a quota. 0 means
	// /32 and /64; otherwise they must be in [1, 32] and [1, 128], or
	// Func returns an error. An IPv4-mapped IPv6 address
	// (::ffff:a.b.c.d) counts as IPv4.
	//
	// A /64 is one host or one home network, but whoever holds more
	// gets more quotas: a site's usual /48 is 65,536 /64s, so 65,536
	// quotas at the default, and a provider's /32 is 2^32 of them. Where
	// that is too generous, choose 56 or 48: each shorter prefix puts more
	// honest callers (the hosts of one site) in one quota.
	IPv4Prefix, IPv6Prefix int
	// TrustedProxies are the networks of the proxies in front of the
	// server, for example netip.MustParsePrefix("10.0.0.0/8"). Empty: no
	// proxy is trusted and Header is not read. An IPv4-mapped network
	// (::ffff:10.0.0.0/104) is taken as the IPv4 one.
	TrustedProxies []netip.Prefix
	// Header is the metadata key the trusted proxies append the address
	// they saw to, comma-separated; all its values are read, in order.
	// Empty means "x-forwarded-for". It requires TrustedProxies.
	Header string
}

// Func checks k and returns its Func. A peer without an IP address
// (a Unix socket) is keyed by its address as is, and is not a trusted
// proxy.
func (k IP) Func() (Func, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	k = k.withDefaults()
	return k.key, nil
}

func (k IP) check() error {
	var errs []string
	if k.IPv4Prefix < 0 || k.IPv4Prefix > 32 {
		errs = append(errs, fmt.Sprintf("IPv4Prefix is %d, must be in [1, 32] (0 for %d)", k.IPv4Prefix, defaultIPv4Prefix))
	}
	if k.IPv6Prefix < 0 || k.IPv6Prefix > 128 {
		errs = append(errs, fmt.Sprintf("IPv6Prefix is %d, must be in [1, 128] (0 for %d)", k.IPv6Prefix, defaultIPv6Prefix))
	}
	for i, p := range k.TrustedProxies {
		if !p.IsValid() {
			errs = append(errs, fmt.Sprintf("TrustedProxies[%d] is not a valid network; parse it with netip.ParsePrefix", i))
		}
	}
	if k.Header != "" && len(k.TrustedProxies) == 0 {
		errs = append(errs, fmt.Sprintf("Header is %q but TrustedProxies is empty: a header is only believed from a trusted proxy", k.Header))
	}
	if len(errs) > 0 {
		return fmt.Errorf("callerkey: IP: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (k IP) withDefaults() IP {
	if k.IPv4Prefix == 0 {
		k.IPv4Prefix = defaultIPv4Prefix
	}
	if k.IPv6Prefix == 0 {
		k.IPv6Prefix = defaultIPv6Prefix
	}
	if k.Header == "" && len(k.TrustedProxies) > 0 {
		k.Header = defaultForwardedHeader
	}
	trusted := make([]netip.Prefix, len(k.TrustedProxies)) // not the caller's slice
	for i, p := range k.TrustedProxies {
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			// Addresses are unmapped before they are matched.
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		trusted[i] = p.Masked()
	}
	k.TrustedProxies = trusted
	return k
}

// defaultIP is PeerIP's configuration.
var defaultIP = IP{}.withDefaults()

// PeerIP is a Func naming callers by the IP address of the connection:
// the whole address for IPv4, its /64 for IPv6, so the holder of a /48 has
// 65,536 quotas (see IP to choose the prefix). Behind a proxy every
// call has the proxy's address: use an IP with TrustedProxies.
func PeerIP(ctx context.Context, fullMethod string) string {
	return defaultIP.key(ctx, fullMethod)
}

func (k IP) key(ctx context.Context, _ string) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	addr, ok := addrOf(p.Addr)
	if !ok {
		return p.Addr.String()
	}
	if k.trusted(addr) {
		md, _ := metadata.FromIncomingContext(ctx)
		addr = k.walk(addr, md.Get(k.Header))
	}
	return k.name(addr)
}

// walk steps left through the hops of vals from hop, a trusted proxy,
// while the hop at hand is trusted, and returns the first hop that is not,
// or the last trusted one if the list ends or holds garbage.
func (k IP) walk(hop netip.Addr, vals []string) netip.Addr {
	for i := len(vals) - 1; i >= 0; i-- {
		rest := vals[i]
		for rest != "" {
			var entry string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				entry, rest = rest[j+1:], rest[:j]
			} else {
				entry, rest = rest, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			a, ok := parseHop(entry)
			if !ok {
				return hop
			}
			hop = a
			if !k.trusted(hop) {
				return hop
			}
		}
	}
	return hop
}

func (k IP) trusted(a netip.Addr) bool {
	for _, p := range k.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// name returns the key of a: its network at the configured length.
func (k IP) name(a netip.Addr) string {
	bits := k.IPv6Prefix
	if a.Is4() {
		bits = k.IPv4Prefix
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil { // cannot happen: bits is checked
		return a.String()
	}
	return p.String()
}

// addrOf returns the IP address of a connection's address, unmapped and
// without zone.
func addrOf(a net.Addr) (netip.Addr, bool) {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			ip = ap.Addr()
		} else if ip, err = netip.ParseAddr(a.String()); err != nil {
			return netip.Addr{}, false
		}
	}
	if !ip.IsValid() {
		return netip.Addr{}, false
	}
	return ip.Unmap().WithZone(""), true
}

// parseHop parses one X-Forwarded-For entry: an address, or an address
// and port as some proxies write it.
func parseHop(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	return a.Unmap().WithZone(""), true
}

// Metadata returns a Func naming callers by the request metadata
// header key, for a header whose value the server can trust, such as an
// API key it checks, or a tenant set by an authenticating proxy it runs.
// A header name is case-insensitive, like all gRPC metadata keys.
//
// The last value of the header counts, and of a comma-separated value its
// last element, spaces trimmed, as for interceptor.Priorities.Header: a proxy that
// appends its verdict to what the client sent, as a value of its own or
// after a comma, names the caller, whatever the client wrote before it.
// A proxy that replaces the header is read the same way. A "-bin" header
// is not split at commas: its last value is the key, as bytes. Calls
// without the header, or whose last element is empty, share one bucket.
//
// Never use it for an address header such as X-Forwarded-For: past your
// proxies, its values are whatever the client wrote, so a client that
// changes them on every call has no quota at all. Use an IP with
// TrustedProxies.
func Metadata(key string) Func {
	key = strings.ToLower(key)
	bin := strings.HasSuffix(key, "-bin")
	return func(ctx context.Context, _ string) string {
		v := metadata.ValueFromIncomingContext(ctx, key)
		if len(v) == 0 {
			return ""
		}
		last := v[len(v)-1]
		if bin {
			return last
		}
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		return strings.TrimSpace(last)
	}
}

// PeerIdentity is a Func naming callers by the client certificate they
// proved with mutual TLS: of the leaf of the chain the server verified,
// the first URI SAN ("uri:spiffe://example.org/billing"), or failing that
// the first DNS SAN ("dns:billing.example.org"), or failing that the
// subject's distinguished name ("subject:CN=billing,O=Example"). The
// server must verify client certificates (tls.Config.ClientAuth set to
// VerifyClientCertIfGiven or RequireAndVerifyClientCert): a certificate
// the server did not verify names no one.
//
// Calls without a verified certificate all get the key "": they share one
// quota, the "unauthenticated" caller's, so they cannot get more than one
// caller's share between them, however many they are, and cannot spend
// any authenticated caller's quota. To refuse them outright, require
// client certificates in the TLS configuration.
func PeerIdentity(ctx context.Context, _ string) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return certIdentity(info.State.VerifiedChains[0][0])
}

func certIdentity(c *x509.Certificate) string {
	if len(c.URIs) > 0 && c.URIs[0] != nil {
		return "uri:" + c.URIs[0].String()
	}
	if len(c.DNSNames) > 0 {
		return "dns:" + c.DNSNames[0]
	}
	if s := c.Subject.String(); s != "" {
		return "subject:" + s
	}
	return ""
}
