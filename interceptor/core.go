package interceptor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/limiter"
)

// core is what a Server and a Client share: the method table, the
// classification, the metrics.
type core struct {
	side  string
	early bool // WithEarlyRejection: a Server's tap takes the permits
	// base are the options the core was built with, which Reload layers
	// its options over.
	base     []func(*config)
	tab      atomic.Pointer[table] // replaced whole by Reload
	metrics  *metrics
	reloadMu sync.Mutex
	// onReject, set by WithLoadReports, learns why each call of g was
	// rejected.
	onReject func(ctx context.Context, g *gate, reason string)
	// served are the methods CheckRegistered found registered
	// ("/pkg.Svc/Method"), whose limiters exist from the start and are
	// made again by each Reload.
	served atomic.Pointer[[]string]
}

func newCore(side string, opts []func(*config)) (*core, error) {
	cfg := newConfig(opts)
	t, err := buildTable(&cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.provider, side)
	if err != nil {
		return nil, fmt.Errorf("interceptor: creating metrics: %w", err)
	}
	c := &core{side: side, base: slices.Clone(opts), metrics: m, early: cfg.early}
	t.newAttrs, t.onGate = m.newAttrs, m.addGate
	c.tab.Store(t)
	return c, nil
}

// buildTable validates cfg and builds the table of a side.
func buildTable(cfg *config) (*table, error) {
	t, err := newTable(cfg)
	if err != nil {
		return nil, err
	}
	if t.callers, err = newCallerLimit(cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// reload layers opts over the options c was built with: see Server.Reload.
func (c *core) reload(opts []func(*config)) error {
	cfg := newConfig(c.base, opts)
	nt, err := buildTable(&cfg)
	if err != nil {
		return err
	}
	nt.newAttrs, nt.onGate = c.metrics.newAttrs, c.metrics.addGate
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	old := c.tab.Load()
	old.mu.Lock() // no limiter is created in old while its state moves
	defer old.mu.Unlock()
	var kept []*gate
	keep := func(oe, ne *entry) {
		if oe != nil && oe.gate != nil && !oe.limit.Exempt && sameLimit(oe.limit, ne.limit) {
			ne.gate = oe.gate
			ne.gate.dryRun.Store(ne.limit.DryRun || nt.dryRun)
			kept = append(kept, oe.gate)
		}
	}
	for name, ne := range nt.methods {
		keep(old.methods[name], ne)
	}
	for service, ne := range nt.services {
		keep(old.services[service], ne)
	}
	if sameLimit(old.def, nt.def) && !nt.def.Exempt {
		for m, g := range old.defGates {
			// Only for methods still on the default: a method that now
			// has an entry of its own (or of its service, or is exempt)
			// would otherwise leave its old limiter listed, under the
			// same name as the live one.
			if nt.onDefault(m) {
				g.dryRun.Store(nt.def.DryRun || nt.dryRun)
				nt.defGates[m] = g
				kept = append(kept, g)
			}
		}
		if nt.otherGate = old.otherGate; nt.otherGate != nil {
			nt.otherGate.dryRun.Store(nt.def.DryRun || nt.dryRun)
			kept = append(kept, nt.otherGate)
		}
	}
	if old.callers != nil && nt.callers != nil && old.callers.gcra != nil && nt.callers.gcra != nil &&
		old.callers.rate == nt.callers.rate && old.callers.maxCallers == nt.callers.maxCallers {
		nt.callers.gcra, nt.callers.lim = old.callers.gcra, old.callers.gcra
	}
	// Calls that read the old table before the Store may still resolve
	// a new method in it: their limiters serve them alone and are not
	// listed (see table.retired).
	old.retired = true
	c.metrics.setGates(kept)
	c.tab.Store(nt)
	nt.prepare(c.served.Load())
	return nil
}

// A rejection is a call the limiter turned away, with what the caller
// should be told.
type rejection struct {
	err      error         // the status error for the caller
	pushback time.Duration // the trailer (see PushbackFunc); NoPushback sends none
}

// admit takes a permit for a call of route r, waiting in the queue if the
// limit has one. On rejection it records the decision and returns the
// status the caller gets.
func (c *core) admit(ctx context.Context, r *route) (limiter.Token, *rejection) {
	if r.gate.dryRun.Load() {
		return c.admitDry(ctx, r), nil
	}
	tok, _, rej := c.take(ctx, r, r.gate.queue)
	return tok, rej
}

// take checks a call's rates, then takes its permit, waiting in the queue
// if wait is set. It returns what the rates charged, so that a caller that
// gives the permit back unused can refund them too.
func (c *core) take(ctx context.Context, r *route, wait bool) (limiter.Token, charged, *rejection) {
	var ch charged
	if r.gate.bucket != nil || r.t.callers != nil {
		var rej *rejection
		if ch, rej = c.checkRates(ctx, r); rej != nil {
			return limiter.Token{}, charged{}, rej
		}
	}
	tok, rej := c.acquire(ctx, r, wait)
	if rej != nil {
		// Turned away after all: the call spends no rate.
		ch.refund()
		return limiter.Token{}, charged{}, rej
	}
	return tok, ch, nil
}

// acquire is admit's concurrency check.
func (c *core) acquire(ctx context.Context, r *route, wait bool) (limiter.Token, *rejection) {
	var caller string
	if r.t.fairKey != nil {
		caller = c.fairCaller(ctx, r)
	}
	tok, reason := c.tryAcquire(ctx, r, caller)
	if reason == "" {
		return tok, nil
	}
	return c.acquireSlow(ctx, r, wait, caller, reason)
}

// acquireSlow is acquire for a call tryAcquire turned away: rejected, or
// queued if the limit has a queue and was merely full.
func (c *core) acquireSlow(ctx context.Context, r *route, wait bool, caller, reason string) (limiter.Token, *rejection) {
	g := r.gate
	if reason != reasonLimit || !wait {
		return limiter.Token{}, c.reject(ctx, r, reason)
	}
	// sluice.queue.wait holds the calls that waited. A full queue rejects
	// at once, and a call whose context ended before it came is not
	// queued: under overload, their ~0 samples would be most of the
	// histogram and hide the waits. (Acquire does not say whether an
	// ErrLimitExceeded came at once or to a waiter when an override set
	// the limit to 0; that rare wait is not recorded.)
	doneBefore := ctx.Err() != nil
	start := time.Now()
	tok, err := g.lim.AcquireFor(ctx, caller)
	if !doneBefore && !errors.Is(err, limiter.ErrLimitExceeded) {
		c.metrics.recordWait(ctx, r.attrs, time.Since(start))
	}
	switch {
	case err == nil:
		return tok, nil
	case late(ctx):
		// Also a cancellation at the deadline: see lateMargin.
		c.rejectedFor(ctx, r, reasonDeadline)
		return limiter.Token{}, &rejection{err: status.FromContextError(context.DeadlineExceeded).Err(), pushback: NoPushback}
	case errors.Is(err, context.Canceled):
		c.rejectedFor(ctx, r, reasonCanceled)
		return limiter.Token{}, &rejection{err: status.FromContextError(err).Err(), pushback: NoPushback}
	}
	return limiter.Token{}, c.reject(ctx, r, reasonLimit)
}

// reject records a rejection and builds its RESOURCE_EXHAUSTED status.
func (c *core) reject(ctx context.Context, r *route, reason string) *rejection {
	s := r.gate.state()
	c.rejectedFor(ctx, r, reason)
	rej := &rejection{err: c.limitError(r, s, reason), pushback: NoPushback}
	if c.side == "server" {
		// Only a server sends a pushback; a client's own rejection never
		// reaches the network. No permit is held here: a PushbackFunc
		// that panics costs the call, not a permit.
		rej.pushback = r.t.pushback(s)
	}
	return rej
}

// limitError is the RESOURCE_EXHAUSTED status of a call of r rejected at
// the concurrency limit, for reason, when the limiter was in state s.
func (c *core) limitError(r *route, s LimiterState, reason string) error {
	whose := ""
	switch reason {
	case reasonPriority:
		whose = " for its priority"
	case reasonFairShare:
		whose = " for a caller over its fair share"
	}
	return status.Errorf(codes.ResourceExhausted,
		"sluice: %s rejected /%s: concurrency limit %d reached%s (%d in flight, %d queued)",
		c.side, r.method, s.Limit, whose, s.Inflight, s.Queued)
}

func (c *core) rejectedFor(ctx context.Context, r *route, reason string) {
	if r.gate.dryRun.Load() {
		c.metrics.rejectedDry(ctx, r.attrs, reason)
	} else {
		r.gate.rejected.Add(1)
		c.metrics.rejected(ctx, r.attrs, reason)
		if c.onReject != nil {
			c.onReject(ctx, r.gate, reason)
		}
	}
	if h := testhook.For(c); h != nil && h.Rejected != nil {
		h.Rejected(reason)
	}
}

// finish releases an admitted call's permit with its outcome and records
// it (see settle).
func (c *core) finish(ctx context.Context, r *route, tok *limiter.Token, res Result) limiter.Outcome {
	o := c.classify(ctx, r, tok, res)
	c.settle(ctx, r, tok, o, res)
	return o
}

// settle releases a classified call's permit. A limit learns RTTs only from
// calls that did the method's real work: a unary call that answered OK
// teaches its RTT to the algorithm and to the moving average behind the
// late rule; a drop only to the algorithm, whose back-off it sizes. An
// error that is a success (there was room to answer it) may have cost
// microseconds, which would teach that the method is that fast: it counts
// for the limit untimed. Streams are always untimed.
func (c *core) settle(ctx context.Context, r *route, tok *limiter.Token, o limiter.Outcome, res Result) {
	switch {
	case res.Stream:
		c.release(ctx, r, tok, o, false)
	case o == limiter.Success && res.Err != nil:
		c.releaseAs(ctx, r, tok, o, true, false)
	default:
		c.release(ctx, r, tok, o, true)
	}
}

// classify runs the Classifier on a finished call. Should it panic, the
// call's permit is released (Ignored: a bug is no signal about capacity)
// before the panic goes on, exactly as for a panicking handler: a bad
// Classifier must not leak a permit per call until the limiter is empty.
func (c *core) classify(ctx context.Context, r *route, tok *limiter.Token, res Result) limiter.Outcome {
	ok := false
	defer func() {
		if !ok {
			c.release(ctx, r, tok, limiter.Ignored, false)
		}
	}()
	o := r.t.classifier(res)
	ok = true
	return o
}

// release returns the permit with outcome o; a timed call's duration is
// recorded and learned from (see releaseAs).
func (c *core) release(ctx context.Context, r *route, tok *limiter.Token, o limiter.Outcome, timed bool) {
	c.releaseAs(ctx, r, tok, o, timed, timed)
}

// releaseAs returns the permit with outcome o. With record, the time the
// permit was held goes to the sluice.rtt histogram; with learn, it is also
// an RTT for the algorithm and, for a success, the gate's moving average.
func (c *core) releaseAs(ctx context.Context, r *route, tok *limiter.Token, o limiter.Outcome, record, learn bool) {
	if !tok.Held() {
		return // a call a dry run let through without a permit
	}
	var held time.Duration
	if learn {
		held = tok.Release(o)
		// 0 is a call the algorithm did not time (see Token.Release).
		if o == limiter.Success && held > 0 {
			r.gate.rtt.Observe(held)
		}
	} else {
		held = tok.ReleaseUntimed(o)
	}
	c.admitted(ctx, r, o)
	if record {
		c.metrics.recordRTT(ctx, r.attrs, held)
	}
	if h := testhook.For(c); h != nil && h.Released != nil {
		h.Released()
	}
}

// admitted records the end of an admitted call of r with outcome o.
func (c *core) admitted(ctx context.Context, r *route, o limiter.Outcome) {
	r.gate.admitted.Add(1)
	c.metrics.admitted(ctx, r.attrs, o)
}

// close implements Server.Close and Client.Close.
func (c *core) close() error { return c.metrics.close() }

// limiters implements Server.Limiters and Client.Limiters.
func (c *core) limiters() []LimiterState {
	c.metrics.mu.Lock()
	defer c.metrics.mu.Unlock()
	out := make([]LimiterState, len(c.metrics.gates))
	for i, ga := range c.metrics.gates {
		out[i] = ga.g.state()
	}
	return out
}
