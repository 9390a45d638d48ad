// Package interceptor protects gRPC servers and clients from overload with
// adaptive concurrency limits.
//
// Every call takes a permit from a limiter before it runs and returns it
// when it ends. How it ended adjusts the limit: successes let it grow,
// RESOURCE_EXHAUSTED answers and deadline overruns make it back off (see
// DefaultClassifier). A call that finds no permit fails at once with
// RESOURCE_EXHAUSTED, a message naming the method and the limit, and a
// grpc-retry-pushback-ms trailer, so the work that is admitted finishes in
// time instead of everything finishing late.
//
// One line on each side:
//
//	limits, err := interceptor.NewServer()
//	srv := grpc.NewServer(limits.ServerOptions()...)
//
//	client, err := interceptor.NewClient()
//	conn, err := grpc.NewClient(target, append(client.DialOptions(), creds)...)
//
// The defaults need no tuning: each method gets its own adaptive AIMD
// limiter (limiter.AIMDConfig) that learns the method's latency and backs
// off when queueing starts. Health checks and reflection are exempt
// (DefaultExempt). WithMethod configures a method or a whole service,
// matched like gRPC's service config: "/pkg.Svc/Method" wins over
// "/pkg.Svc/", which wins over WithDefault.
//
// # Rate limits
//
// A Limit may also carry a RateLimit, a fixed calls-per-second contract
// checked before the adaptive concurrency limit, and WithCallerLimiter
// gives each caller a quota of its own (a ratelimit.Keyed, or one shared
// by a fleet in Redis), checked first. Name callers (package callerkey)
// by something they cannot forge: callerkey.PeerIdentity (the verified
// mTLS certificate), callerkey.PeerIP (IPv6 by /64: the holder of a /48
// has 65,536 quotas; a callerkey.IP chooses the prefix), a callerkey.IP
// that believes X-Forwarded-For only as far as your own proxies wrote it,
// or callerkey.Metadata
// for a header the server checks itself (an API key). Calls over a rate
// get RESOURCE_EXHAUSTED with the exact wait in the grpc-retry-pushback-ms
// trailer and in a google.rpc.RetryInfo detail.
//
// # Priorities
//
// Each call has a Priority: its Limit's, or the one it names in the header
// WithPriorities sets. A server believes that header only from the callers
// Priorities.TrustedPeers or Trusted names (by default nobody: any client
// could claim "critical"), takes its last value (the one an edge proxy
// appended) and caps it at Priorities.MaxClaimed. As calls in
// flight near the limit, lower priorities are rejected first
// (PriorityShares): by default sheddable calls may use half of the limit,
// default and critical calls all of it. Admission of every priority is one
// atomic step on the same counter, so together they never exceed the limit.
//
// # Fleets
//
// A limiter protects its own process. WithLoadReports makes every limited
// call, rejected ones included, carry an ORCA load report of its limiter
// (utilization, admitted and failed calls per second), so that clients
// balancing with gRPC's weighted_round_robin policy send less to the
// servers that shed:
//
//	limits, err := interceptor.NewServer(interceptor.WithLoadReports())
//	srv := grpc.NewServer(limits.ServerOptions()...)
//
// Server.RegisterLoadReports adds the out-of-band ORCA service.
//
// # Rolling out, and large requests
//
// WithDryRun (or Limit.DryRun, or SetDryRun at run time) decides and
// records every call as sluice would, with sluice.dry_run=true on the
// would-be rejections, and lets every call through: watch a limit on real
// traffic before enforcing it. WithEarlyRejection takes permits in a tap
// handle, before grpc-go decodes a request, so that under overload a
// rejected call with a large request costs little.
//
// # Configuration files
//
// Package config reads limits from a JSON file, the protobuf JSON form of
// sluice.v1.Config (proto/sluice/v1/config.proto), and returns the
// ServerOptions it describes; config.Watch reloads a Server when the file
// changes.
//
// # Reloading
//
// Server.Reload and Client.Reload apply new options to running
// interceptors, layered over the options they were built with, so that a
// config file that does not mention a setting made in code (a per-caller
// quota, the priority header) leaves it as it was. Everything is validated
// first (a bad configuration changes nothing), unchanged limiters keep
// their learned limits, and calls admitted before the reload return their
// permits to the limiter that gave them.
//
// # Streams
//
// A stream holds one permit for its whole life: on the server until the
// handler returns, on the client until the stream ends however it ends.
// A stream's duration is not a latency, so streams report their outcome
// untimed (limiter.Token.ReleaseUntimed): drops lower the limit, successes
// may raise it, and a long stream never reads as a slow one.
//
// # Metrics
//
// With an OpenTelemetry SDK installed (or WithMeterProvider), a Server or
// Client reports, per limiter or per method:
//
//	sluice.limit              gauge           {request}  the live limit
//	sluice.inflight           up-down counter {request}  permits held
//	sluice.queue.length       up-down counter {request}  calls waiting for a permit
//	sluice.requests           counter         {request}  decisions and outcomes
//	sluice.rtt                histogram       s          unary calls' permit time
//	sluice.queue.wait         histogram       s          time spent queued, by calls that waited
//	sluice.override.remaining gauge           s          time an operator's override has left, 0 if none
//
// with rpc.system.name = "grpc", rpc.method = "pkg.Svc/Method" (semantic
// conventions v1.43), sluice.side, sluice.limiter, and on sluice.requests
// sluice.decision with sluice.outcome or sluice.reason. Attribute sets are
// computed once per method, so recording allocates nothing. A method the
// server has not registered (grpc.UnknownServiceHandler), or a client call
// no generated stub made, is recorded as rpc.method = "_OTHER", as the
// conventions ask, and shares the "_OTHER" limiter: callers cannot choose
// the metrics' cardinality.
package interceptor
