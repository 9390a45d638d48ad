package interceptor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/sluice-go/sluice/limiter"
)

// Instrument and attribute names. The attributes of semconv's RPC
// conventions (rpc.system.name, rpc.method) come from the semconv package.
const (
	meterName = "github.com/sluice-go/sluice/interceptor"

	// attrSide is "server" or "client".
	attrSide = attribute.Key("sluice.side")
	// attrLimiter names the limiter: "pkg.Svc/Method" for a per-method
	// limiter, "pkg.Svc/" for a service's, "_OTHER" for the one shared by
	// methods the Server has not registered or the Client's generated
	// stubs did not call.
	attrLimiter = attribute.Key("sluice.limiter")
	// attrDecision is "admitted" or "rejected".
	attrDecision = attribute.Key("sluice.decision")
	// attrOutcome is the limiter.Outcome of an admitted call: "success",
	// "dropped" or "ignored".
	attrOutcome = attribute.Key("sluice.outcome")
	// attrReason says why a call was rejected: "limit" (no permit, queue
	// full), "deadline" or "canceled" (the call's context ended while it
	// waited in the queue), "rate" (over the Limit's RateLimit) or
	// "caller_rate" (over WithCallerLimiter), "priority" (over the
	// share of the limit the call's priority may use), "fair_share" (a
	// caller over its share of a full limit, WithFairShare).
	attrReason = attribute.Key("sluice.reason")
	// attrDryRun is true on the rejections of a limiter in a dry run
	// (Limit.DryRun): decisions recorded but not enforced.
	attrDryRun = attribute.Key("sluice.dry_run")
)

// Rejection reasons, the values of attrReason.
const (
	reasonLimit      = "limit"
	reasonDeadline   = "deadline"
	reasonCanceled   = "canceled"
	reasonPriority   = "priority"
	reasonRate       = "rate"
	reasonCallerRate = "caller_rate"
	reasonFairShare  = "fair_share"
)

var reasons = []string{reasonLimit, reasonDeadline, reasonCanceled, reasonPriority, reasonRate, reasonCallerRate, reasonFairShare}

// rpcBuckets are histogram boundaries in seconds from 100µs to 30s,
// roughly ×2.5 apart: RPCs span that range and the defaults of the SDK
// (0 to 10000, meant for milliseconds) would put them all in two buckets.
var rpcBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// metrics holds the instruments of one Server or Client.
type metrics struct {
	side     attribute.KeyValue
	requests metric.Int64Counter
	rtt      metric.Float64Histogram
	wait     metric.Float64Histogram
	reg      metric.Registration

	mu    sync.Mutex
	gates []gateAttrs // observed by the callback
}

type gateAttrs struct {
	g   *gate
	opt []metric.ObserveOption
}

// attrs are a route's precomputed measurement options, so that recording
// allocates nothing.
type attrs struct {
	admitted [3][]metric.AddOption // by limiter.Outcome
	rejected map[string][]metric.AddOption
	// dryRejected are the rejections of a dry run.
	dryRejected map[string][]metric.AddOption
	record      []metric.RecordOption
}

func newMetrics(p metric.MeterProvider, side string) (*metrics, error) {
	if p == nil {
		p = otel.GetMeterProvider()
	}
	m := &metrics{side: attrSide.String(side)}
	meter := p.Meter(meterName)
	var err, e error
	m.requests, e = meter.Int64Counter("sluice.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Calls that reached a limiter, by decision and, when admitted, outcome."))
	err = errors.Join(err, e)
	m.rtt, e = meter.Float64Histogram("sluice.rtt", metric.WithUnit("s"),
		metric.WithDescription("Time admitted unary calls held their permit."),
		metric.WithExplicitBucketBoundaries(rpcBuckets...))
	err = errors.Join(err, e)
	m.wait, e = meter.Float64Histogram("sluice.queue.wait", metric.WithUnit("s"),
		metric.WithDescription("Time calls spent waiting in a limiter's queue, for calls that waited."),
		metric.WithExplicitBucketBoundaries(rpcBuckets...))
	err = errors.Join(err, e)
	limit, e := meter.Int64ObservableGauge("sluice.limit", metric.WithUnit("{request}"),
		metric.WithDescription("The concurrency limit of each limiter."))
	err = errors.Join(err, e)
	inflight, e := meter.Int64ObservableUpDownCounter("sluice.inflight", metric.WithUnit("{request}"),
		metric.WithDescription("Permits held by calls in progress, per limiter."))
	err = errors.Join(err, e)
	queued, e := meter.Int64ObservableUpDownCounter("sluice.queue.length", metric.WithUnit("{request}"),
		metric.WithDescription("Calls waiting for a permit, per limiter."))
	err = errors.Join(err, e)
	override, e := meter.Float64ObservableGauge("sluice.override.remaining", metric.WithUnit("s"),
		metric.WithDescription("Time until the operator's override of each limiter expires; 0 when it has none."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, ga := range m.gates {
			o.ObserveInt64(limit, int64(ga.g.lim.Limit()), ga.opt...)
			o.ObserveInt64(inflight, int64(ga.g.lim.Inflight()), ga.opt...)
			o.ObserveInt64(queued, int64(ga.g.lim.QueueLen()), ga.opt...)
			o.ObserveFloat64(override, ga.g.overrideRemaining(time.Now()).Seconds(), ga.opt...)
		}
		return nil
	}, limit, inflight, queued, override)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// addGate starts observing g's limit, in-flight count and queue. A
// limiter of the same name is no longer observed: the newest is the live
// one, and two series under one name would be merged into nonsense.
func (m *metrics) addGate(g *gate) {
	set := attribute.NewSet(semconv.RPCSystemNameGRPC, m.side, attrLimiter.String(g.name))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gates = slices.DeleteFunc(m.gates, func(ga gateAttrs) bool { return ga.g.name == g.name })
	m.gates = append(m.gates, gateAttrs{g, []metric.ObserveOption{metric.WithAttributeSet(set)}})
}

// setGates replaces the observed limiters by gs (after a Reload, the
// limiters that were kept; new ones are added as they are made).
func (m *metrics) setGates(gs []*gate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := map[*gate]bool{}
	for _, g := range gs {
		kept[g] = true
	}
	var next []gateAttrs
	for _, ga := range m.gates {
		if kept[ga.g] {
			next = append(next, ga)
		}
	}
	m.gates = next
}

// newAttrs precomputes every attribute set a route records with.
func (m *metrics) newAttrs(method string, g *gate) *attrs {
	base := []attribute.KeyValue{semconv.RPCSystemNameGRPC, semconv.RPCMethod(method), m.side, attrLimiter.String(g.name)}
	with := func(kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv...)...)
	}
	a := &attrs{rejected: map[string][]metric.AddOption{}, dryRejected: map[string][]metric.AddOption{}}
	for _, o := range []limiter.Outcome{limiter.Success, limiter.Dropped, limiter.Ignored} {
		a.admitted[o] = []metric.AddOption{metric.WithAttributeSet(with(attrDecision.String("admitted"), attrOutcome.String(o.String())))}
	}
	for _, r := range reasons {
		a.rejected[r] = []metric.AddOption{metric.WithAttributeSet(with(attrDecision.String("rejected"), attrReason.String(r)))}
		a.dryRejected[r] = []metric.AddOption{metric.WithAttributeSet(with(attrDecision.String("rejected"), attrReason.String(r), attrDryRun.Bool(true)))}
	}
	a.record = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(base...))}
	return a
}

func (m *metrics) admitted(ctx context.Context, a *attrs, o limiter.Outcome) {
	if int(o) < len(a.admitted) {
		m.requests.Add(ctx, 1, a.admitted[o]...)
	}
}

func (m *metrics) rejected(ctx context.Context, a *attrs, reason string) {
	m.requests.Add(ctx, 1, a.rejected[reason]...)
}

func (m *metrics) rejectedDry(ctx context.Context, a *attrs, reason string) {
	m.requests.Add(ctx, 1, a.dryRejected[reason]...)
}

func (m *metrics) recordRTT(ctx context.Context, a *attrs, d time.Duration) {
	m.rtt.Record(ctx, d.Seconds(), a.record...)
}

func (m *metrics) recordWait(ctx context.Context, a *attrs, d time.Duration) {
	m.wait.Record(ctx, d.Seconds(), a.record...)
}

// close stops the observations.
func (m *metrics) close() error { return m.reg.Unregister() }
