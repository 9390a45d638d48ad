package interceptor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice/limiter"
)

// A Priority ranks calls for shedding: as in-flight calls near the limit,
// lower priorities are rejected first. The zero value is PriorityDefault.
type Priority int8

// The priorities, highest first.
const (
	PriorityCritical  Priority = 1
	PriorityDefault   Priority = 0
	PrioritySheddable Priority = -1
)

func (p Priority) String() string {
	switch p {
	case PriorityCritical:
		return "critical"
	case PriorityDefault:
		return "default"
	case PrioritySheddable:
		return "sheddable"
	}
	return fmt.Sprintf("Priority(%d)", int8(p))
}

// parsePriority reads a priority name ("critical", "default", "sheddable",
// any case), as sent in the header of WithPriorityHeader.
func parsePriority(s string) (Priority, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "critical":
		return PriorityCritical, true
	case "default":
		return PriorityDefault, true
	case "sheddable":
		return PrioritySheddable, true
	}
	return PriorityDefault, false
}

// PriorityShares says how much of a limiter's limit each priority may use:
// a call is admitted only while the calls in flight are below its share
// of the limit. Critical calls may always use the whole limit.
type PriorityShares struct {
	// Default is the share of PriorityDefault calls, in (0, 1].
	Default float64
	// Sheddable is the share of PrioritySheddable calls, in (0, Default].
	Sheddable float64
}

// DefaultPriorityShares lets default calls use the whole limit, like
// critical ones, and sheddable calls half of it: out of the box only
// sheddable work gives way. Lower Default (0.9, say) to keep room that
// only critical calls can take.
var DefaultPriorityShares = PriorityShares{Default: 1, Sheddable: 0.5}

// WithPriorityShares replaces DefaultPriorityShares.
func WithPriorityShares(s PriorityShares) Option {
	return func(c *config) {
		if !(s.Default > 0 && s.Default <= 1) || !(s.Sheddable > 0 && s.Sheddable <= s.Default) {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorityShares(%+v): want 0 < Sheddable <= Default <= 1", s))
			return
		}
		c.shares = s
	}
}

// WithPriorityHeader lets each call name its priority in the metadata
// header key ("critical", "default" or "sheddable"), overriding its
// method's Limit.Priority.
//
// A server believes the header only from trusted callers, since anyone
// could otherwise claim "critical" and skip the shedding meant for them:
// WithTrustedPeers or WithPriorityTrust says who (your edge proxies, say),
// and by default nobody is, so the header is ignored. When the header
// appears more than once (or as one comma-separated value), the last
// value counts: a proxy that appends its verdict overrides what the client
// sent, rather than the other way round. An unknown last value is no
// claim. WithMaxClaimedPriority caps what a header may claim.
//
// A client reads its own outgoing header, set by the application: it
// needs no trust, and the cap applies.
func WithPriorityHeader(key string) Option {
	return func(c *config) {
		if strings.TrimSpace(key) == "" {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorityHeader(%q): a metadata key is required", key))
			return
		}
		c.priorityHeader = strings.ToLower(key)
	}
}

// WithTrustedPeers makes a server believe the priority header (see
// WithPriorityHeader) of calls whose connection comes from one of
// networks: IP addresses ("192.0.2.7") or CIDR networks ("10.0.0.0/8",
// "fd00::/8"), typically the proxies that set the header. Any other
// caller's header is ignored. It replaces WithPriorityTrust.
func WithTrustedPeers(networks ...string) ServerOption {
	return serverOption(func(c *config) {
		var nets []netip.Prefix
		for _, n := range networks {
			p, err := parseNetwork(n)
			if err != nil {
				c.errs = append(c.errs, fmt.Errorf("interceptor: WithTrustedPeers(%q): want an IP address or a network in CIDR notation, such as \"10.0.0.0/8\" or \"fd00::/8\"", n))
				continue
			}
			nets = append(nets, p)
		}
		c.trust = func(ctx context.Context) bool {
			addr, ok := peerAddr(ctx)
			if !ok {
				return false
			}
			for _, p := range nets {
				if p.Contains(addr) {
					return true
				}
			}
			return false
		}
	})
}

// WithPriorityTrust makes a server believe the priority header (see
// WithPriorityHeader) of the calls for which trusted returns true, for
// trust that an address cannot express: an authenticated peer identity,
// a mTLS certificate. trusted runs once per call with a header and must be
// fast and safe for concurrent use. It replaces WithTrustedPeers.
func WithPriorityTrust(trusted func(ctx context.Context) bool) ServerOption {
	return serverOption(func(c *config) {
		if trusted == nil {
			c.errs = append(c.errs, errors.New("interceptor: WithPriorityTrust(nil): a func is required; omit the option to trust no caller"))
			return
		}
		c.trust = trusted
	})
}

// WithMaxClaimedPriority caps the priority a header may claim (see
// WithPriorityHeader): higher claims are lowered to p. Use it when even
// trusted callers should not be able to claim critical work, leaving that
// to the methods whose Limit.Priority says so. The default cap is
// PriorityCritical, no cap.
func WithMaxClaimedPriority(p Priority) Option {
	return func(c *config) {
		if p < PrioritySheddable || p > PriorityCritical {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithMaxClaimedPriority(%v): want PriorityCritical, PriorityDefault or PrioritySheddable", p))
			return
		}
		c.maxClaim = p
	}
}

// parseNetwork reads "10.0.0.0/8" or a single address, "10.1.2.3". An
// IPv4 network written in IPv6 ("::ffff:10.0.0.0/104") is kept as IPv4,
// the form peerAddr gives.
func parseNetwork(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// peerAddr returns the remote IP address of a server call.
func peerAddr(ctx context.Context) (netip.Addr, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, false
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// priority returns the priority of a call of route r: the one its header
// claims, if the header is configured, the caller trusted and the claim
// valid (capped by WithMaxClaimedPriority); else its Limit's.
func (c *core) priority(ctx context.Context, r *route) Priority {
	t := r.t
	if t.priorityHeader == "" {
		return r.gate.priority
	}
	var md metadata.MD
	if c.side == "server" {
		md, _ = metadata.FromIncomingContext(ctx)
	} else {
		md, _ = metadata.FromOutgoingContext(ctx)
	}
	v := md.Get(t.priorityHeader)
	if len(v) == 0 {
		return r.gate.priority
	}
	if c.side == "server" && (t.trust == nil || !t.trust(ctx)) {
		return r.gate.priority
	}
	last := v[len(v)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	p, ok := parsePriority(last)
	if !ok {
		return r.gate.priority
	}
	return min(p, t.maxClaim)
}

// reserve returns how many permits a call of priority p must leave free.
func reserve(shares PriorityShares, p Priority, limit int) int {
	share := 1.0
	switch {
	case p >= PriorityCritical:
		return 0
	case p == PriorityDefault:
		share = shares.Default
	default:
		share = shares.Sheddable
	}
	// Admit while in flight < share × limit: leave limit − ⌈share × limit⌉
	// free (the epsilon keeps 0.9 × 10 from rounding up to 10).
	return limit - int(math.Ceil(share*float64(limit)-1e-9))
}

// tryAcquire takes a permit for a call of priority p without waiting.
func (c *core) tryAcquire(ctx context.Context, r *route) (limiter.Token, bool, bool) {
	p := c.priority(ctx, r)
	if p >= PriorityCritical || (p == PriorityDefault && r.t.shares.Default >= 1) {
		tok, ok := r.gate.lim.TryAcquire()
		return tok, ok, false
	}
	tok, ok := r.gate.lim.TryAcquireLeaving(reserve(r.t.shares, p, r.gate.lim.Limit()))
	return tok, ok, !ok
}
