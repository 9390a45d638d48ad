package interceptor

import "time"

// Limiters returns a snapshot of every live limiter, in creation order,
// one per name. Limiters are created on a method's first call, so a method
// never called has none yet, unless Server.CheckRegistered has created the
// limiters of every registered method; after a Reload, a limiter that no call can
// reach any more is no longer listed (calls it admitted still return their
// permits to it).
func (s *Server) Limiters() []LimiterState { return s.core.limiters() }

// SetOverride pins the limiter named name (as Limiters names it) at limit
// for ttl: the algorithm keeps learning meanwhile, and when ttl has passed
// the limiter resumes adapting. A new override replaces a running one.
// limit 0 rejects every call. Use it during an incident, typically from
// the admin service (package admin).
func (s *Server) SetOverride(name string, limit int, ttl time.Duration) error {
	return s.core.setOverride(name, limit, ttl)
}

// ClearOverride ends the override of the limiter named name at once; it
// does nothing if there is none.
func (s *Server) ClearOverride(name string) error { return s.core.clearOverride(name) }

// SetDryRun switches the limiter named name (as Limiters names it) in or
// out of a dry run (see Limit.DryRun) until the next Reload, which applies
// the configuration's setting again. The limiter keeps its state.
func (s *Server) SetDryRun(name string, on bool) error { return s.core.setDryRun(name, on) }

// Close stops reporting the live limits to the MeterProvider. The
// interceptors keep working.
func (s *Server) Close() error { return s.core.close() }

// Limiters is Server.Limiters for a Client. A client's limits are not
// overridden by hand: they protect the client's own callers from a slow
// downstream, and a Reload changes them.
func (c *Client) Limiters() []LimiterState { return c.core.limiters() }

// Close is Server.Close for a Client.
func (c *Client) Close() error { return c.core.close() }
