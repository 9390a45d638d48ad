package interceptor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/fileopt"
	"github.com/sluice-go/sluice/limiter"
)

// A ServerOption configures a Server.
type ServerOption interface{ applyServer(*config) }

// A ClientOption configures a Client.
type ClientOption interface{ applyClient(*config) }

// An Option configures a Server or a Client: it is a ServerOption and a
// ClientOption. The options of one side only are of that side's type, so
// that the compiler rejects them on the other.
type Option func(*config)

func (o Option) applyServer(c *config) { apply(o, c) }
func (o Option) applyClient(c *config) { apply(o, c) }

type (
	serverOption func(*config)
	clientOption func(*config)
)

func (o serverOption) applyServer(c *config) { apply(o, c) }
func (o clientOption) applyClient(c *config) { apply(o, c) }

// apply runs o on c; a nil option, such as a nil Option variable, does
// nothing.
func apply[O ~func(*config)](o O, c *config) {
	if o != nil {
		o(c)
	}
}

// applies returns what newConfig applies of opts, one side's options.
func applies[O any](opts []O, apply func(O, *config)) []func(*config) {
	fs := make([]func(*config), 0, len(opts))
	for _, o := range opts {
		if any(o) != nil {
			fs = append(fs, func(c *config) { apply(o, c) })
		}
	}
	return fs
}

// A Limit describes the limiter of one method, one service, or the default.
// The zero Limit is the protective default: an adaptive AIMD limiter
// (limiter.AIMDConfig's defaults) and no wait queue.
type Limit struct {
	// Algorithm makes the algorithm of each limiter built from this Limit:
	// limiter.AIMDConfig, VegasConfig, Gradient2Config, FixedConfig, or a
	// configuration of your own. Nil means limiter.AIMDConfig{}. A Reload
	// keeps the state of a limiter whose configuration is equal; one of
	// your own type is rebuilt every time.
	Algorithm limiter.AlgorithmConfig
	// Queue lets calls that find every permit taken wait for one, within
	// their deadline and the queue's bound (limiter.Queue). The zero
	// Queue queues nobody: such calls are rejected at once.
	Queue limiter.Queue
	// Rate adds a rate limit (see RateLimit), checked before the
	// concurrency limit. Each limiter built from this Limit has its own
	// bucket: per method for WithDefault, shared by a service's methods for
	// a service entry. The zero value adds none.
	Rate RateLimit
	// Priority ranks this Limit's calls for shedding (see PriorityShares);
	// Priorities.Header lets a call override it.
	Priority Priority
	// Exempt lets calls through without a permit and without metrics.
	Exempt bool
	// DryRun decides every call as the limiter would, records the
	// decisions (sluice.requests with sluice.dry_run=true) and logs the
	// rejections, but lets every call through: a way to watch a limit on
	// production traffic before enforcing it. The limit keeps adapting
	// from the calls it would have admitted. A dry run never makes a call
	// wait: a call that would have queued counts as rejected.
	DryRun bool
}

// sameLimit reports whether a and b build identical limiters.
func sameLimit(a, b Limit) bool {
	// A limiter switches in and out of a dry run without losing its state.
	a.DryRun, b.DryRun = false, false
	fa, fb := a.Algorithm, b.Algorithm
	a.Algorithm, b.Algorithm = nil, nil
	return a == b && sameAlgorithm(fa, fb)
}

// sameAlgorithm reports whether a and b make identical algorithms: both
// nil, or equal configurations of this module's. A configuration of
// another type may not be comparable, so it never equals: its limiters are
// rebuilt on every Reload.
func sameAlgorithm(a, b limiter.AlgorithmConfig) bool {
	switch a.(type) {
	case nil, limiter.AIMDConfig, limiter.VegasConfig, limiter.Gradient2Config, limiter.FixedConfig:
		return a == b
	}
	return false
}

// DefaultExempt lists the services exempt from limiting unless an option
// names them: health checks must answer under overload, or a load balancer
// takes a busy server for a dead one; reflection and sluice's own admin
// service are tooling an operator needs most when the server is busy; the
// ORCA out-of-band stream (Server.RegisterLoadReports) lives as long as its
// client and would hold a permit all that time.
var DefaultExempt = []string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
	"/sluice.v1.LimitsService/",
	"/xds.service.orca.v3.OpenRcaService/",
}

type config struct {
	def            Limit
	methods        []namedLimit
	classifier     Classifier
	pushback       PushbackFunc
	maxHold        time.Duration
	provider       metric.MeterProvider
	callerKey      callerkey.Func
	callerRate     RateLimit
	callerLimiter  CallerLimiter // WithCallerLimiter's, nil for a file's caller_limit
	maxCallers     int
	shares         PriorityShares
	priorityHeader string
	trust          func(context.Context) bool // nil: nobody
	maxClaim       Priority
	fairKey        callerkey.Func // WithFairShare's; nil for none
	early          bool           // WithEarlyRejection
	dryRun         bool           // WithDryRun
	logger         *slog.Logger
	loadReports    bool
	errs           []error
	// layer counts the layers of options applied so far, minus one: see
	// newConfig.
	layer int
	// skipFile makes options that came from a config file do nothing.
	skipFile bool
}

type namedLimit struct {
	name  string
	limit Limit
	layer int
}

// newConfig applies layers of options in order. A later layer overrides
// what an earlier one set, method by method; within one layer a method
// may be configured once. With more than one layer, the first is the base
// a Reload builds on, and its options that came from a config file are
// skipped: the file being reloaded replaces them whole, so that an entry
// removed from the file is gone, not kept from the file's first version.
func newConfig(layers ...[]func(*config)) config {
	c := config{
		classifier: DefaultClassifier,
		pushback:   DefaultPushback,
		maxHold:    defaultMaxPushback,
		shares:     defaultShares,
		maxClaim:   PriorityDefault,
	}
	for i, opts := range layers {
		c.layer = i
		c.skipFile = i == 0 && len(layers) > 1
		for _, apply := range opts {
			apply(&c)
		}
	}
	return c
}

// WithDefault sets the Limit of every method no WithMethod option matches.
// Each such method gets a limiter of its own, so a slow method cannot eat
// the permits of a fast one and latency-based algorithms see one kind of
// call each.
func WithDefault(l Limit) Option {
	return func(c *config) { c.def = l }
}

// WithMethod sets the Limit of a method, "/package.Service/Method", or of
// every method of a service, "/package.Service/", matched as in gRPC's
// service config: a method entry wins over its service's entry, which wins
// over the default. All methods of a service entry share one limiter.
// Naming an entry of DefaultExempt replaces its exemption.
//
// A name that cannot be served is an error of NewServer: a method that
// its service's protobuf definition, linked into the program, does not
// declare (a typo such as "/pkg.Svc/Getitem"), or a service that differs
// from a linked one only in case. A service whose definition is not
// linked cannot be checked that way; a Server logs a warning for each
// such name at its first call, unless Server.CheckRegistered has checked
// the names against the grpc.Server.
func WithMethod(name string, l Limit) Option {
	return func(c *config) { c.methods = append(c.methods, namedLimit{name, l, c.layer}) }
}

// WithExempt exempts methods or services (names as for WithMethod, and
// checked as they are) from limiting, in addition to DefaultExempt.
func WithExempt(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.methods = append(c.methods, namedLimit{n, Limit{Exempt: true}, c.layer})
		}
	}
}

// WithClassifier replaces DefaultClassifier, which decides what each
// finished call tells the limiter.
func WithClassifier(f Classifier) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithClassifier(nil): a Classifier is required; omit the option for DefaultClassifier"))
			return
		}
		c.classifier = f
	}
}

// WithPushback replaces DefaultPushback, which computes the
// grpc-retry-pushback-ms trailer of a server's rejections.
func WithPushback(f PushbackFunc) ServerOption {
	return serverOption(func(c *config) {
		if f == nil {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithPushback(nil): a PushbackFunc is required; omit the option for DefaultPushback"))
			return
		}
		c.pushback = f
	})
}

// WithMaxPushback bounds how long a Client honours a server's pushback (see
// Client). Longer pushbacks are cut to d, and a "do not retry" pushback
// holds for d; 0 turns honouring off. The default is 2s.
func WithMaxPushback(d time.Duration) ClientOption {
	return clientOption(func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithMaxPushback(%v): must be >= 0 (0 turns pushback off)", d))
			return
		}
		c.maxHold = d
	})
}

// WithMeterProvider sets where metrics go. The default is the global
// provider, otel.GetMeterProvider(), which records nothing until an SDK is
// installed.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) {
		if p == nil {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithMeterProvider(nil): a MeterProvider is required; omit the option for the global one"))
			return
		}
		c.provider = p
	}
}

func init() {
	fileopt.FromFile = func(o any) any { return fileOption(o.(ServerOption)) }
	fileopt.CallerQuota = func(key callerkey.Func, perSecond float64, burst, maxCallers int) any {
		return callerRateLimit(key, RateLimit{PerSecond: perSecond, Burst: burst}, maxCallers)
	}
	fileopt.PriorityHeader = func(h string) any { return priorityHeader(h) }
}

// fileOption marks o as an option from a config file: see newConfig.
func fileOption(o ServerOption) ServerOption {
	return serverOption(func(c *config) {
		if !c.skipFile {
			o.applyServer(c)
		}
	})
}

// WithDryRun puts every limit in a dry run (see Limit.DryRun): sluice
// decides and records every call as it would, and lets all of them
// through. Roll a limit out with it first, watch sluice.requests for
// decisions with sluice.dry_run=true, then remove it. SetDryRun switches a
// single limiter at run time.
func WithDryRun() Option {
	return func(c *config) { c.dryRun = true }
}

// WithLogger sets where sluice logs what an operator must know of: the
// rejections of a dry run (at most one line per limiter per second) and,
// at a Server's first call, the configured names it could not check (see
// WithMethod). Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}
