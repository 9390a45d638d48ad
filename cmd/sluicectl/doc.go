// Command sluicectl shows and steers the limiters of a running server
// through sluice's admin service (sluice.v1.LimitsService, package admin),
// so an operator needs neither the protobuf API nor grpcurl.
//
// Install it with
//
//	go install github.com/sluice-go/sluice/cmd/sluicectl@latest
//
// Usage:
//
//	sluicectl list     [flags] ADDRESS
//	sluicectl watch    [flags] ADDRESS
//	sluicectl override [flags] ADDRESS NAME LIMIT -for DURATION
//	sluicectl clear    [flags] ADDRESS NAME
//	sluicectl dry-run  [flags] ADDRESS NAME on|off
//
// list prints every limiter: its limit, the calls in flight and queued,
// the moving average of its calls' durations (RTT), the calls it admitted
// (counted as they end) and rejected since it was created, and whether it
// is in a dry run or under an override, and for how long yet. The
// limiters under the most pressure come first: the most calls queued,
// then the fullest. watch draws the same table every -interval (1s) until
// Ctrl-C or, with -n, that many times; on a terminal it redraws in place.
// In place of the counts it shows calls admitted and rejected per second
// since the server's report before, and it puts the most rejections per
// second first. It follows the server's watch stream, and when the server
// goes away (a restart) it says so and picks up as soon as the server is
// back. A server that does not count calls shows "-" for the counts and
// the rates; a watch shows "-" until it can tell a rate: a second
// report, or two intervals without one (no count moved).
//
// override pins a limiter's limit for -for (at most 24h; 0 rejects every
// call), after which the limiter adapts again; clear ends an override at
// once; dry-run switches a limiter to recording its decisions without
// enforcing them, until the server's configuration is next reloaded. Each
// prints what changed. NAME is a limiter as list shows it, such as
// "shop.v1.Orders/Get", "shop.v1.Orders/" for a limiter shared by a
// service, or "_OTHER"; a leading slash is allowed.
//
// ADDRESS is host:port or unix:///path/to/socket. The admin service
// admits only the callers it was told to (admin.Register), so the
// connection flags follow grpcurl's:
//
//	-cacert FILE      the CAs of the server's certificate (default: the system's)
//	-cert, -key FILE  a client certificate, for admin.WithTLSClients (mTLS)
//	-plaintext        no TLS: a Unix socket (admin.WithUnixSocketPeers) or a test
//	-servername NAME  the name the server's certificate must carry
//	-H 'name: value'  a header on every call, for an admin.WithAuthorizer of your own
//	-timeout D        how long a command other than watch may take (10s)
//
// Flags may come before or after the arguments. A refusal says what to
// do about it: PERMISSION_DENIED names the server's authorizer, and a
// server that does not serve the admin service is told apart from one
// that cannot be reached. The exit status is 0 on success, 2 for a command
// line that could not be understood and 1 for any other error.
package main
