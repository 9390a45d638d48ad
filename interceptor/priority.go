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
// any case), as sent in the header of Priorities.Header.
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

// defaultShares lets default calls use the whole limit, like critical
// ones, and sheddable calls half of it: out of the box only sheddable
// work gives way.
var defaultShares = PriorityShares{Default: 1, Sheddable: 0.5}

// Priorities says how calls are ranked for shedding beyond their method's
// Limit.Priority (see WithPriorities). The zero value ranks calls by their
// Limit alone.
type Priorities struct {
	// Shares is how much of the limit each priority may use. The zero
	// value lets default calls use the whole limit and sheddable calls
	// half of it; lower Default (0.9, say) to keep room that only
	// critical calls can take.
	Shares PriorityShares

	// Header lets each call name its priority in this metadata key
	// ("critical", "default" or "sheddable"), overriding its method's
	// Limit.Priority. When the header appears more than once (or as one
	// comma-separated value), the last value counts: a proxy that appends
	// its verdict overrides what the client sent. An unknown last value is
	// no claim. A client reads its own outgoing header, set by the
	// application, and needs no trust.
	Header string

	// A server believes the header only from trusted callers, since
	// anyone could otherwise claim "critical" and skip the shedding meant
	// for them; with neither of these set nobody is trusted, and the
	// header is ignored. TrustedPeers are the IP addresses ("192.0.2.7")
	// or CIDR networks ("10.0.0.0/8", "fd00::/8") of the connections to
	// believe, typically the proxies that set the header. Trusted is for
	// trust an address cannot express (a verified peer identity); it runs
	// once per call with a header and must be fast and safe for
	// concurrent use. A call is trusted if either says so.
	TrustedPeers []string
	Trusted      func(ctx context.Context) bool

	// MaxClaimed caps the priority a header may claim: higher claims are
	// lowered to it. The zero value, PriorityDefault, lets a header lower
	// its call's priority but not raise it: set PriorityCritical to let
	// trusted callers claim critical work.
	MaxClaimed Priority
}

// WithPriorities replaces the default Priorities: shedding by each
// method's Limit.Priority, with the shares described on PriorityShares.
func WithPriorities(p Priorities) Option {
	return func(c *config) {
		if p.Shares == (PriorityShares{}) {
			p.Shares = defaultShares
		}
		if s := p.Shares; !(s.Default > 0 && s.Default <= 1) || !(s.Sheddable > 0 && s.Sheddable <= s.Default) {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorities: Shares %+v: want 0 < Sheddable <= Default <= 1", s))
			return
		}
		if p.MaxClaimed < PrioritySheddable || p.MaxClaimed > PriorityCritical {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorities: MaxClaimed %v: want PriorityCritical, PriorityDefault or PrioritySheddable", p.MaxClaimed))
			return
		}
		if p.Header != "" && strings.TrimSpace(p.Header) == "" {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorities: Header %q: want a metadata key, or empty for none", p.Header))
			return
		}
		var nets []netip.Prefix
		for _, n := range p.TrustedPeers {
			pfx, err := parseNetwork(n)
			if err != nil {
				c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorities: TrustedPeers %q: want an IP address or a network in CIDR notation, such as \"10.0.0.0/8\" or \"fd00::/8\"", n))
				return
			}
			nets = append(nets, pfx)
		}
		c.shares, c.maxClaim, c.trust = p.Shares, p.MaxClaimed, trustOf(nets, p.Trusted)
		c.priorityHeader = strings.ToLower(strings.TrimSpace(p.Header))
	}
}

// trustOf is whom a server believes the priority header of: connections
// from nets, and calls trusted says so of; nil for nobody.
func trustOf(nets []netip.Prefix, trusted func(context.Context) bool) func(context.Context) bool {
	if len(nets) == 0 {
		return trusted
	}
	return func(ctx context.Context) bool {
		if addr, ok := peerAddr(ctx); ok {
			for _, p := range nets {
				if p.Contains(addr) {
					return true
				}
			}
		}
		return trusted != nil && trusted(ctx)
	}
}

// priorityHeader is a configuration file's priority_header: it names the
// header and leaves the rest of the Priorities as the code set them.
func priorityHeader(key string) ServerOption {
	return serverOption(func(c *config) { c.priorityHeader = strings.ToLower(key) })
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
// valid (capped by Priorities.MaxClaimed); else its Limit's.
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

// tryAcquire takes a permit for a call of r without waiting, for the
// caller fairCaller named (see WithFairShare). It returns why it could
// not: reasonFairShare for a caller over its share, reasonPriority for a
// call whose priority must leave the permits it found free, else
// reasonLimit.
func (c *core) tryAcquire(ctx context.Context, r *route, caller string) (limiter.Token, string) {
	p := c.priority(ctx, r)
	shed := !(p >= PriorityCritical || (p == PriorityDefault && r.t.shares.Default >= 1))
	if !shed && caller == "" {
		if tok, ok := r.gate.lim.TryAcquire(); ok {
			return tok, ""
		}
		return limiter.Token{}, reasonLimit
	}
	leave := 0
	if shed {
		leave = reserve(r.t.shares, p, r.gate.lim.Limit())
	}
	tok, err := r.gate.lim.TryAcquireFor(caller, leave)
	switch {
	case err == nil:
		return tok, ""
	case errors.Is(err, limiter.ErrOverShare):
		return limiter.Token{}, reasonFairShare
	case shed:
		return limiter.Token{}, reasonPriority
	}
	return limiter.Token{}, reasonLimit
}

// fairCaller names the caller of a call of r for WithFairShare: "" without
// it. Callers the key cannot tell apart share one name.
func (c *core) fairCaller(ctx context.Context, r *route) string {
	if r.t.fairKey == nil {
		return ""
	}
	if k := r.t.fairKey(ctx, r.full); k != "" {
		return k
	}
	return anonymous
}
