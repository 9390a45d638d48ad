package interceptor

import (
	"context"
	"fmt"
	"math"
	"strings"

	"google.golang.org/grpc/metadata"

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

// ParsePriority reads a priority name ("critical", "default", "sheddable",
// any case), as sent in the header of WithPriorityHeader.
func ParsePriority(s string) (Priority, bool) {
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
// method's Limit.Priority. A server reads the incoming header, a client
// the outgoing one. Unknown values are ignored. Callers can raise their
// own priority this way: set the header at a trusted edge, or strip it
// from untrusted traffic.
func WithPriorityHeader(key string) Option {
	return func(c *config) {
		if strings.TrimSpace(key) == "" {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPriorityHeader(%q): a metadata key is required", key))
			return
		}
		c.priorityHeader = strings.ToLower(key)
	}
}

// priority returns the priority of a call of route r.
func (c *core) priority(ctx context.Context, r *route) Priority {
	if r.t.priorityHeader != "" {
		var md metadata.MD
		if c.side == "server" {
			md, _ = metadata.FromIncomingContext(ctx)
		} else {
			md, _ = metadata.FromOutgoingContext(ctx)
		}
		if v := md.Get(r.t.priorityHeader); len(v) > 0 {
			if p, ok := ParsePriority(v[0]); ok {
				return p
			}
		}
	}
	return r.gate.priority
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
