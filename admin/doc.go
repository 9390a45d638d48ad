// Package admin serves sluice.v1.LimitsService: the live state of a
// server's limiters (list and watch) and operator overrides that pin a
// limit for a while.
//
// The service can take a server down (an override of 0 rejects every
// call, and can be renewed for ever), so it is closed until you say who may
// use it. Register refuses to register it without one of:
//
//   - WithTLSClients: callers with a client certificate the server
//     verified, carrying one of the listed names (mTLS);
//   - WithUnixSocketPeers: callers on a Unix socket, when the socket's file
//     permissions are the access control;
//   - WithAuthorizer: your own check, given the call's context.
//
// No caller is trusted for its address: proxies and service mesh sidecars
// (Istio forwards from 127.0.0.6) make remote callers look local. Register
// the service on an internal server and listener:
//
//	err := admin.Register(adminServer, limits, admin.WithTLSClients("spiffe://example.com/ops"))
//
// Limiters are named as the metrics' sluice.limiter attribute names them:
// "pkg.Svc/Method", "pkg.Svc/" for a service entry, "_OTHER". Requests
// may also name a method as code does, with a leading '/'. A method's
// limiter exists from its first call, or from the start once the server
// has called interceptor.Server.CheckRegistered. The service takes the
// *interceptor.Server of interceptor.NewServer. Register reflection beside it for grpcurl
// (see ExampleWithUnixSocketPeers).
//
// Every override and clear is logged with log/slog (WithLogger), naming
// the caller, the limiter, the limit and how long it holds; so are
// refused calls, at most 10 a second with a count of those left out, and
// a limiter name a caller sent is cut to 128 bytes. Watch streams are bounded in number (WithMaxWatches) and
// lifetime (WithWatchLifetime). sluice never limits the service (it is in
// interceptor.DefaultExempt).
package admin
