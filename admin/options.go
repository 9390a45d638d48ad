package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// An Option configures a Service.
type Option func(*service)

// Defaults of the watch stream bounds: enough watches for a few
// dashboards and operators, too few to matter as a load.
const (
	defaultMaxWatches    = 16
	defaultWatchLifetime = 10 * time.Minute
)

// WithAuthorizer admits the callers a admits. It can be given more than
// once, and combined with WithTLSClients and WithUnixSocketPeers: a caller
// is served if any of them admits it. When only one is configured, its
// status error reaches the caller as it is; when several refuse, the
// caller gets PERMISSION_DENIED with all their reasons.
func WithAuthorizer(a Authorizer) Option {
	return func(s *service) {
		if a == nil {
			s.errs = append(s.errs, errors.New("admin: WithAuthorizer(nil): give an Authorizer that decides who may change limits"))
			return
		}
		s.auth = append(s.auth, a)
	}
}

// WithTLSClients admits callers that present a client certificate the
// server verified (its tls.Config has ClientAuth set to
// tls.RequireAndVerifyClientCert or tls.VerifyClientCertIfGiven, and
// ClientCAs to the CAs that issue operator certificates) and whose leaf
// certificate carries one of names as a DNS name, URI (such as a SPIFFE
// ID) or email address among its subject alternative names. The matched
// name is the caller in the log. To match on other fields, write an
// Authorizer that reads credentials.TLSInfo from the peer.
func WithTLSClients(names ...string) Option {
	return func(s *service) {
		if len(names) == 0 {
			s.errs = append(s.errs, errors.New("admin: WithTLSClients(): list the certificate names (DNS, URI or email SANs) to admit"))
			return
		}
		set := make(map[string]bool, len(names))
		for i, n := range names {
			if n == "" {
				s.errs = append(s.errs, fmt.Errorf("admin: WithTLSClients: name %d is empty; give the DNS, URI or email SAN of an operator certificate", i))
				return
			}
			set[n] = true
		}
		s.auth = append(s.auth, tlsClients(set))
	}
}

// WithUnixSocketPeers admits every caller connected through a Unix domain
// socket. sluice cannot tell who is on the other end of the socket, so
// the socket file's owner and permissions are the access control: use
// this only when the socket is in a directory that only operators can
// reach and no proxy forwards other traffic to it.
func WithUnixSocketPeers() Option {
	return func(s *service) { s.auth = append(s.auth, unixSocketPeers) }
}

// WithLogger sets where the audit log goes: every override and clear,
// with who made it, and refused calls (at Info and Warn; lists and
// watches at Debug). nil, the default, means slog.Default() at the time of
// each call.
//
// Refused calls come at the pace of whoever is refused, so at most 10 are
// logged a second; the next one logged says in "suppressed" how many were
// left out before it. A limiter name is logged as it is if it is plain
// text of at most 128 bytes; otherwise it is quoted in Go syntax and cut
// to 128 bytes, followed by "..." and its length in "limiter_bytes", so
// that no caller can write megabytes or forged lines into the log.
func WithLogger(l *slog.Logger) Option {
	return func(s *service) { s.log = l }
}

// withClock sets the clock of the refusal log's throttle, for tests.
func withClock(now func() time.Time) Option {
	return func(s *service) { s.now = now }
}

// WithMaxWatches bounds how many WatchLimits streams may be open at once
// (16 by default), since each holds a goroutine and polls
// every limiter. A watch beyond it is refused with RESOURCE_EXHAUSTED.
func WithMaxWatches(n int) Option {
	return func(s *service) {
		if n < 1 {
			s.errs = append(s.errs, fmt.Errorf("admin: WithMaxWatches(%d): must be at least 1", n))
			return
		}
		s.maxWatches = n
	}
}

// WithWatchLifetime bounds how long one WatchLimits stream lasts
// (10 minutes by default), so a forgotten watch does not hold
// its slot for ever and a revoked operator stops seeing updates. At the
// end the stream finishes with OK; a client that wants more watches again.
func WithWatchLifetime(d time.Duration) Option {
	return func(s *service) {
		if d <= 0 {
			s.errs = append(s.errs, fmt.Errorf("admin: WithWatchLifetime(%v): must be > 0", d))
			return
		}
		s.watchLifetime = d
	}
}
