package admin

import "context"

// An Option configures a Service.
type Option func(*Service)

// An Authorizer decides whether the caller of fullMethod may use the
// service. A non-nil error refuses the call: a status error is returned as
// it is, anything else as PERMISSION_DENIED.
type Authorizer func(ctx context.Context, fullMethod string) error

// WithAuthorizer replaces LoopbackOnly, the default Authorizer.
func WithAuthorizer(a Authorizer) Option {
	return func(s *Service) { s.auth = a }
}
