package interceptor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/bucket"
	"github.com/sluice-go/sluice/internal/grpcname"
	"github.com/sluice-go/sluice/internal/overrun"
	"github.com/sluice-go/sluice/limiter"
)

// maxRoutes bounds how many distinct method names get a route (and a
// limiter of their own under the default Limit). Unknown methods (see
// table.lookupOther) never get one, so the bound is only a backstop; past
// it, methods are routed as unknown ones.
const maxRoutes = 1000

// otherMethod is what semconv records as rpc.method for a method the
// instrumentation does not know, and names the limiter such methods share.
const otherMethod = "_OTHER"

// A gate is one limiter and what is known about the calls it admits.
type gate struct {
	name  string // sluice.limiter attribute: "pkg.Svc/Method", "pkg.Svc/" or "_OTHER"
	lim   *limiter.Limiter
	queue bool // Acquire may wait
	// bucket enforces rate, if the Limit has one.
	omu      sync.Mutex // guards ovr
	ovr      *override  // the operator's override, if any
	bucket   *bucket.Bucket
	rate     RateLimit
	priority Priority
	// dryRun lets every call through while recording the decisions.
	dryRun atomic.Bool
	// dryLog is when a dry-run rejection was last logged (UnixNano), and
	// dryCount how many happened since.
	dryLog, dryCount atomic.Int64
	// panicLog is when a panic of user code in the tap was last logged
	// (UnixNano): see Server.tapPanicked.
	panicLog atomic.Int64
	// rtt is the moving average of the RTT of admitted unary calls that
	// answered OK (see core.releaseAs): the basis of the default pushback
	// and of the server's rule of overruns.
	rtt overrun.Baseline
	// admitted and rejected count the calls this limiter decided, as
	// sluice.requests counts them: admitted when the permit comes back,
	// rejected when the call is turned away (see LimiterState).
	admitted, rejected atomic.Uint64
}

func (g *gate) state() LimiterState {
	var until time.Time
	g.omu.Lock()
	if g.ovr != nil {
		until = g.ovr.until
	}
	g.omu.Unlock()
	return LimiterState{
		OverrideUntil: until,
		Name:          g.name,
		Limit:         g.lim.Limit(),
		Inflight:      g.lim.Inflight(),
		Queued:        g.lim.QueueLen(),
		RTT:           g.rtt.Value(),
		DryRun:        g.dryRun.Load(),
		Admitted:      g.admitted.Load(),
		Rejected:      g.rejected.Load(),
	}
}

// A route is what one method name resolves to.
type route struct {
	t      *table // the table (and so the settings) the route belongs to
	full   string // as gRPC names it, "/pkg.Svc/Method"
	method string // without the leading slash, for metrics
	gate   *gate  // nil when exempt
	attrs  *attrs // metric attributes; nil when exempt
}

// A table resolves method names to routes. Configured entries are fixed
// at construction; routes are created on first use and kept in a
// copy-on-write map, so that a lookup is a single map read with no lock.
type table struct {
	methods  map[string]*entry // "/pkg.Svc/Method"
	services map[string]*entry // "pkg.Svc"
	def      Limit
	newAttrs func(method string, g *gate) *attrs
	onGate   func(g *gate) // tells the metrics about a new limiter

	// The settings that Reload replaces together with the table.
	classifier     Classifier
	pushback       PushbackFunc
	callers        *callerLimit // nil without WithCallerLimiter
	shares         PriorityShares
	priorityHeader string
	trust          func(context.Context) bool // whose priority header counts
	maxClaim       Priority                   // the highest priority a header may claim
	fairKey        callerkey.Func             // WithFairShare's; nil for none
	maxHold        time.Duration              // a Client's bound on honoured pushbacks
	dryRun         bool                       // WithDryRun: every gate in a dry run
	logger         *slog.Logger               // nil: slog.Default()

	defGates  map[string]*gate // per-method limiters of the default Limit
	otherGate *gate            // the overflow limiter, once made

	routes atomic.Pointer[map[string]*route]
	// others holds the shared routes of unknown methods: by configured
	// service name, "" for those on the default Limit. Copy-on-write too.
	others atomic.Pointer[map[string]*route]
	mu     sync.Mutex // serializes route creation
	// retired is set (under mu) once Reload has replaced the table: the
	// limiters it still creates, for calls that read it just before, are
	// not reported, since no later call can reach them.
	retired bool

	// unchecked lists the configured names that the protobuf registry
	// could not check (see grpcname.LinkedFault); checked is set once a Server has
	// warned of them, or CheckRegistered has checked them against the
	// grpc.Server, or there are none.
	unchecked []string
	checked   atomic.Bool
}

// entry is one configured method or service.
type entry struct {
	name  string
	limit Limit
	gate  *gate // shared by every method of a service entry; lazily made
}

// validMethod checks a WithMethod name and splits it. It accepts
// "/pkg.Svc/Method" and "/pkg.Svc/" and says what is wrong otherwise.
func validMethod(name string) (service, method string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("interceptor: method name %q %s: want \"/package.Service/Method\" or \"/package.Service/\"", name, why)
	}
	if !strings.HasPrefix(name, "/") {
		return "", "", bad("does not start with '/'")
	}
	service, method, ok := strings.Cut(name[1:], "/")
	if !ok {
		return "", "", bad("has no '/' after the service")
	}
	if f := grpcname.Check(service, method); f.Kind != grpcname.OK {
		return "", "", bad(f.CodeMessage())
	}
	return service, method, nil
}

// newTable validates the configuration and builds the table. Every error
// is reported, not just the first.
func newTable(c *config) (*table, error) {
	t := &table{
		methods:        map[string]*entry{},
		services:       map[string]*entry{},
		def:            c.def,
		classifier:     c.classifier,
		pushback:       c.pushback,
		shares:         c.shares,
		priorityHeader: c.priorityHeader,
		trust:          c.trust,
		maxClaim:       c.maxClaim,
		fairKey:        c.fairKey,
		maxHold:        c.maxHold,
		dryRun:         c.dryRun,
		logger:         c.logger,
		defGates:       map[string]*gate{},
	}
	errs := append([]error(nil), c.errs...)
	if err := checkLimit("WithDefault", c.def); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]int{} // name -> layer that configured it
	add := func(name string, l Limit, user bool, layer int) {
		service, method, err := validMethod(name)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if user {
			if at, ok := seen[name]; ok && at == layer {
				errs = append(errs, fmt.Errorf("interceptor: method %q is configured twice", name))
				return
			}
			// A later layer (Reload over the options of NewServer)
			// replaces the entry.
			seen[name] = layer
			if err := checkLimit(fmt.Sprintf("WithMethod(%q)", name), l); err != nil {
				errs = append(errs, err)
				return
			}
			if fault := grpcname.LinkedFault(service, method); fault != "" {
				errs = append(errs, fmt.Errorf("interceptor: method name %q cannot be served: %s", name, fault))
				return
			}
			if !grpcname.Linked(service) && !isDefaultExempt(name) {
				t.unchecked = append(t.unchecked, name)
			}
		}
		e := &entry{name: name, limit: l}
		if method == "" {
			t.services[service] = e
		} else {
			t.methods[name] = e
		}
	}
	for _, name := range DefaultExempt {
		add(name, Limit{Exempt: true}, false, -1)
	}
	for _, m := range c.methods {
		add(m.name, m.limit, true, m.layer)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t.checked.Store(len(t.unchecked) == 0)
	empty, none := map[string]*route{}, map[string]*route{}
	t.routes.Store(&empty)
	t.others.Store(&none)
	return t, nil
}

// checkLimit builds one limiter from l to surface configuration errors at
// construction rather than at the first call.
func checkLimit(where string, l Limit) error {
	if l.Exempt {
		return nil
	}
	if _, err := newLimiter(l); err != nil {
		return fmt.Errorf("interceptor: %s: %w", where, err)
	}
	if l.Priority < PrioritySheddable || l.Priority > PriorityCritical {
		return fmt.Errorf("interceptor: %s: Limit.Priority is %d, must be PriorityCritical, PriorityDefault or PrioritySheddable", where, l.Priority)
	}
	if _, err := newBucket(l.Rate); err != nil {
		return fmt.Errorf("interceptor: %s: Limit.Rate: %w", where, err)
	}
	return nil
}

// limiterOptions are the options every method's Limiter has.
func limiterOptions(l Limit) []limiter.Option {
	return []limiter.Option{limiter.WithQueue(l.Queue)}
}

func newLimiter(l Limit) (*limiter.Limiter, error) {
	opts := limiterOptions(l)
	if l.Algorithm != nil {
		alg, err := l.Algorithm.New()
		if err != nil {
			return nil, err
		}
		if alg == nil {
			return nil, errors.New("Limit.Algorithm returned a nil Algorithm")
		}
		opts = append(opts, limiter.WithAlgorithm(alg))
	}
	return limiter.New(opts...)
}

// lookup returns the route of fullMethod, creating it on first use.
func (t *table) lookup(fullMethod string) *route {
	if r, ok := (*t.routes.Load())[fullMethod]; ok {
		return r
	}
	return t.create(fullMethod)
}

// prepare makes the routes (and so the limiters) of methods, if not nil.
func (t *table) prepare(methods *[]string) {
	if methods == nil {
		return
	}
	for _, m := range *methods {
		t.lookup(m)
	}
}

// existing returns the route of fullMethod if a call has already made it,
// else nil; it never creates one, so a name no call of a registered method
// has used costs nothing.
func (t *table) existing(fullMethod string) *route {
	return (*t.routes.Load())[fullMethod]
}

func (t *table) create(fullMethod string) *route {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.routes.Load()
	if r, ok := old[fullMethod]; ok {
		return r
	}
	if len(old) >= maxRoutes {
		return t.overflowLocked(fullMethod)
	}
	r := t.resolveLocked(fullMethod)
	next := make(map[string]*route, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[fullMethod] = r
	t.routes.Store(&next)
	return r
}

// resolveLocked applies the precedence method > service > default.
func (t *table) resolveLocked(fullMethod string) *route {
	method := strings.TrimPrefix(fullMethod, "/")
	var e *entry
	if e = t.methods[fullMethod]; e == nil {
		service, _, _ := strings.Cut(method, "/")
		e = t.services[service]
	}
	var g *gate
	switch {
	case e != nil && e.limit.Exempt:
		return &route{t: t, full: fullMethod, method: method}
	case e != nil:
		if e.gate == nil {
			e.gate = t.newGate(strings.TrimPrefix(e.name, "/"), e.limit)
		}
		g = e.gate
	case t.def.Exempt:
		return &route{t: t, full: fullMethod, method: method}
	default:
		if g = t.defGates[method]; g == nil {
			g = t.newGate(method, t.def)
			t.defGates[method] = g
		}
	}
	return &route{t: t, full: fullMethod, method: method, gate: g, attrs: t.newAttrs(method, g)}
}

// overflowLocked routes a method past maxRoutes as an unknown one; a
// configured method keeps its entry (its name is the operator's).
func (t *table) overflowLocked(fullMethod string) *route {
	if t.methods[fullMethod] != nil {
		return t.resolveLocked(fullMethod)
	}
	return t.withMethod(t.otherLocked(t.otherKey(fullMethod)), fullMethod)
}

// lookupOther returns the route of a method the caller does not know: on
// a server, one it has not registered (served by grpc.UnknownServiceHandler);
// on a client, a call that no generated stub made. Its name is whatever the
// peer or the caller chose, so it must not become a metric attribute or a
// limiter of its own: such methods are recorded as rpc.method "_OTHER".
// A method configured by name keeps its entry; one of a configured
// service uses the service's limiter (or exemption); the rest share the
// "_OTHER" limiter of the default Limit.
func (t *table) lookupOther(fullMethod string) *route {
	if t.methods[fullMethod] != nil {
		return t.lookup(fullMethod)
	}
	key := t.otherKey(fullMethod)
	r, ok := (*t.others.Load())[key]
	if !ok {
		t.mu.Lock()
		r = t.otherLocked(key)
		t.mu.Unlock()
	}
	return t.withMethod(r, fullMethod)
}

// otherKey is the others key of an unknown method: its service if
// configured, else "".
func (t *table) otherKey(fullMethod string) string {
	service, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if t.services[service] != nil {
		return service
	}
	return ""
}

// withMethod returns a copy of the shared route r naming the call's own
// method, for the callerkey.Func and the rejection message; the limiter and the
// metric attributes stay r's. Only unknown methods pay this allocation.
func (t *table) withMethod(r *route, fullMethod string) *route {
	c := *r
	c.full, c.method = fullMethod, strings.TrimPrefix(fullMethod, "/")
	return &c
}

// otherLocked returns the shared route of unknown methods under key,
// creating it on first use.
func (t *table) otherLocked(key string) *route {
	old := *t.others.Load()
	if r, ok := old[key]; ok {
		return r
	}
	r := &route{t: t, full: "/" + otherMethod, method: otherMethod}
	var g *gate
	if key != "" {
		e := t.services[key]
		if !e.limit.Exempt {
			if e.gate == nil {
				e.gate = t.newGate(strings.TrimPrefix(e.name, "/"), e.limit)
			}
			g = e.gate
		}
	} else if !t.def.Exempt {
		if t.otherGate == nil {
			t.otherGate = t.newGate(otherMethod, t.def)
		}
		g = t.otherGate
	}
	if g != nil {
		r.gate, r.attrs = g, t.newAttrs(otherMethod, g)
	}
	next := make(map[string]*route, len(old)+1)
	maps.Copy(next, old)
	next[key] = r
	t.others.Store(&next)
	return r
}

// onDefault reports whether method ("pkg.Svc/Method") falls to the
// default Limit: no method or service entry matches it.
func (t *table) onDefault(method string) bool {
	service, _, _ := strings.Cut(method, "/")
	return t.methods["/"+method] == nil && t.services[service] == nil
}

func (t *table) newGate(name string, l Limit) *gate {
	lim, err := newLimiter(l)
	if err != nil {
		// newTable built this Limit once already; a configuration of the user's that
		// fails only later falls back to the default algorithm rather
		// than leaving the method unprotected.
		lim, _ = limiter.New(limiterOptions(l)...)
	}
	// The bucket was validated with the Limit; it cannot fail here.
	bucket, _ := newBucket(l.Rate)
	g := &gate{name: name, lim: lim, queue: l.Queue != limiter.Queue{}, bucket: bucket, rate: l.Rate, priority: l.Priority}
	g.dryRun.Store(l.DryRun || t.dryRun)
	if t.onGate != nil && !t.retired {
		t.onGate(g)
	}
	return g
}
