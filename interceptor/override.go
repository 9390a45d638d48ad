package interceptor

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
)

// ErrUnknownLimiter is returned by SetOverride and ClearOverride for a name
// Limiters does not list.
var ErrUnknownLimiter = errors.New("interceptor: no limiter of that name")

// maxOverride is the longest override SetOverride accepts: an override is
// for an incident, not a configuration.
const maxOverride = 24 * time.Hour

// override is a limit pinned by an operator until a time.
type override struct {
	until time.Time
	stop  func() bool // cancels the expiry
}

// setOverride implements Server.SetOverride.
func (c *core) setOverride(name string, limit int, ttl time.Duration) error {
	if ttl <= 0 || ttl > maxOverride {
		return fmt.Errorf("interceptor: override ttl is %v, must be in (0, %v]", ttl, maxOverride)
	}
	g := c.gateNamed(name)
	if g == nil {
		return fmt.Errorf("%w: %q", ErrUnknownLimiter, name)
	}
	g.omu.Lock()
	defer g.omu.Unlock()
	if err := g.lim.Pin(limit); err != nil {
		return fmt.Errorf("interceptor: override of %q: %w", name, err)
	}
	if g.ovr != nil {
		g.ovr.stop()
	}
	o := &override{until: time.Now().Add(ttl)}
	o.stop = c.afterFunc(ttl, func() {
		g.omu.Lock()
		defer g.omu.Unlock()
		if g.ovr == o { // not replaced or cleared meanwhile
			g.ovr = nil
			g.lim.Unpin()
		}
	})
	g.ovr = o
	return nil
}

// clearOverride implements Server.ClearOverride.
func (c *core) clearOverride(name string) error {
	g := c.gateNamed(name)
	if g == nil {
		return fmt.Errorf("%w: %q", ErrUnknownLimiter, name)
	}
	g.omu.Lock()
	defer g.omu.Unlock()
	if g.ovr != nil {
		g.ovr.stop()
		g.ovr = nil
		g.lim.Unpin()
	}
	return nil
}

// overrideRemaining is how long g's override has left at now, 0 if g has
// none.
func (g *gate) overrideRemaining(now time.Time) time.Duration {
	g.omu.Lock()
	defer g.omu.Unlock()
	if g.ovr == nil {
		return 0
	}
	return max(g.ovr.until.Sub(now), 0)
}

func (c *core) gateNamed(name string) *gate {
	c.metrics.mu.Lock()
	defer c.metrics.mu.Unlock()
	for _, ga := range c.metrics.gates {
		if ga.g.name == name {
			return ga.g
		}
	}
	return nil
}

// afterFunc runs f after d and returns a func that cancels it: the timers
// of overrides, of the tap's hold and of a client's pushback hold, which a
// test can steer (testhook).
func (c *core) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if h := testhook.For(c); h != nil && h.AfterFunc != nil {
		return h.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
}
