package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluice-go/sluice/ratelimit"
)

// Bounds and defaults of a Limiter's configuration.
const (
	// MinRate and MaxRate bound the rate of a Limiter, in requests per
	// second per key. Redis's clock counts microseconds, so the interval
	// between requests, 1/rate, is kept in whole microseconds.
	MinRate = 1e-9
	MaxRate = 1e6

	// DefaultPrefix starts every key the Limiter writes, so that quotas
	// cannot collide with the application's own keys in the same Redis.
	DefaultPrefix = "sluice:quota:"

	// DefaultTimeout bounds each decision's round trip to Redis: a quota
	// must not add more to a call than a slow Redis would take from it.
	DefaultTimeout = 50 * time.Millisecond

	// DefaultBackoff is how long a Limiter leaves Redis alone after a
	// failure before it tries again, deciding by its failure policy
	// meanwhile: a dead Redis costs one timeout per backoff, not per call.
	DefaultBackoff = time.Second

	// DefaultFallbackKeys bounds the keys of the default fallback limiter
	// (see ratelimit.WithMaxKeys).
	DefaultFallbackKeys = 100_000

	// DefaultMaxLocalKeys bounds the callers a Limiter remembers in this
	// process (see WithMaxLocalKeys): a few MiB at most.
	DefaultMaxLocalKeys = 100_000

	// maxWindow bounds burst/rate in microseconds, so that a TAT next to a
	// reading of Redis's clock stays an exact integer in a Lua number
	// (a float64, exact to 2^53): 2^51 µs is about 71 years.
	maxWindow = 1 << 51
)

// Sources of a decision, the "source" attribute of the decisions metric.
const (
	SourceRedis      = "redis"       // decided by Redis, or a denial of Redis remembered
	SourceFallback   = "fallback"    // Redis failed: decided by the local fallback limiter
	SourceFailOpen   = "fail_open"   // Redis failed: allowed by FailOpen
	SourceFailClosed = "fail_closed" // Redis failed: rejected by FailClosed
)

// MetricDecisions is the name of the counter of decisions, with attributes
// "source" (SourceRedis, ...) and "outcome" ("allowed" or "rejected").
// Decisions not made by Redis show that the fleet-wide quota is not in
// force: alert on them.
const MetricDecisions = "sluice.caller_quota.decisions"

type policy int

const (
	policyFallback policy = iota
	policyOpen
	policyClosed
)

// An Option configures a Limiter built by New.
type Option func(*config)

type config struct {
	prefix   string
	timeout  time.Duration
	backoff  time.Duration
	policy   policy
	fallback *ratelimit.Keyed
	maxLocal int
	provider metric.MeterProvider
	errs     []error
}

// WithPrefix sets the prefix of the Limiter's keys in Redis, DefaultPrefix
// unless set. Limiters with different rates should use different
// prefixes: those that share one share their callers' state.
func WithPrefix(p string) Option {
	return func(c *config) {
		if p == "" {
			c.errs = append(c.errs, errors.New("redis: WithPrefix: the prefix is empty; it keeps quotas apart from other keys, use e.g. \"myapp:quota:\""))
			return
		}
		c.prefix = p
	}
}

// WithTimeout bounds each round trip to Redis, DefaultTimeout unless set.
// A decision that takes longer is made by the failure policy instead.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("redis: WithTimeout(%v): must be > 0", d))
			return
		}
		c.timeout = d
	}
}

// WithBackoff sets how long Redis is left alone after a failure,
// DefaultBackoff unless set. Then one decision tries Redis again; the
// others keep to the failure policy until it answers.
func WithBackoff(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("redis: WithBackoff(%v): must be > 0", d))
			return
		}
		c.backoff = d
	}
}

// A FailurePolicy decides the calls Redis cannot decide, being slow (over
// WithTimeout) or unreachable: FailOpen, FailClosed or Fallback. The zero
// FailurePolicy is the default, a Fallback to a ratelimit.Keyed of the
// Limiter's rate and burst (DefaultFallbackKeys keys at most).
type FailurePolicy struct {
	policy   policy
	fallback *ratelimit.Keyed
}

var (
	// FailOpen admits every call while Redis cannot decide: for quotas
	// that are a courtesy, where a rejected paying caller costs more than
	// an unlimited one. The concurrency limit still protects the server.
	FailOpen = FailurePolicy{policy: policyOpen}
	// FailClosed rejects every call while Redis cannot decide, with a
	// retry-after of the time left until Redis is tried again: for quotas
	// that must never be exceeded, as when they stand for a cost.
	FailClosed = FailurePolicy{policy: policyClosed}
)

// Fallback decides with g, a limiter of this process, while Redis cannot
// decide. Each replica then enforces the quota on its own, as without
// Redis, so a fleet of N admits up to N times the quota: give g a rate
// divided by the number of replicas to keep to the quota instead. g's
// state is not shared with Redis. A nil g is the default fallback.
func Fallback(g *ratelimit.Keyed) FailurePolicy {
	return FailurePolicy{policy: policyFallback, fallback: g}
}

// WithFailurePolicy sets how calls are decided while Redis cannot decide
// them; see FailurePolicy.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *config) { c.policy, c.fallback = p.policy, p.fallback }
}

// WithMaxLocalKeys bounds the callers the Limiter remembers in this
// process, DefaultMaxLocalKeys unless set; n must be at least 1. It
// remembers a caller Redis denied, until Redis would admit it again, and
// the refunds a caller had (see Limiter.Refund), about 40 bytes a caller
// whatever the length of its key. As in ratelimit.WithMaxKeys, the bound
// is kept per shard, n/64 rounded up, so a few more than n may be held.
// When a shard is full, a new entry takes the place of those that hold
// nothing any more, or else of the one that would expire first:
// forgetting a denial never admits a call Redis would deny, it only costs
// one round trip more.
func WithMaxLocalKeys(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("redis: WithMaxLocalKeys(%d): must be >= 1; the memory is what spares Redis the calls of callers over their quota", n))
			return
		}
		c.maxLocal = n
	}
}

// WithMeterProvider sets where the decisions metric goes; the default is
// otel.GetMeterProvider().
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) { c.provider = p }
}

// A Limiter is a per-key quota shared by every process that uses the same
// Redis and prefix: the fleet-wide counterpart of ratelimit.Keyed, with
// the same algorithm and the same Decision. Plug it into a server with
// interceptor.WithCallerLimiter.
//
// Each decision is one Lua script run atomically by Redis, on Redis's
// clock, so that the replicas' clocks do not matter. A key's state is one
// number, its theoretical arrival time, stored under the prefix and a
// hash of the key, and set to expire when the key would have its whole
// burst back: Redis itself then forgets idle callers, and memory follows
// the callers active within one burst window.
//
// A caller over its quota costs Redis one decision per retry-after, not
// one per call: the Limiter remembers Redis's denial in this process until
// Redis would admit the caller again, and answers its calls meanwhile
// with the time left. A flood from one caller therefore cannot push Redis
// past its timeout and so every replica onto its failure policy. Refunds
// are bounded alike (see Refund). The memory holds at most
// WithMaxLocalKeys callers.
//
// When Redis is slow (over WithTimeout) or unreachable, the failure policy
// decides (WithFailurePolicy: a Fallback by default, FailOpen, FailClosed), and
// Redis is left alone for WithBackoff before one decision tries it again.
// No decision waits longer than the timeout.
//
// All methods are safe for concurrent use.
type Limiter struct {
	client   goredis.Scripter
	interval int64 // 1/rate in µs, >= 1
	window   int64 // burst*interval in µs
	rate     float64
	burst    int
	cfg      config

	// downUntil is when Redis may be tried again after a failure, in ns
	// since start; 0 while Redis answers. probing is held by the one
	// decision that tries Redis again after a backoff.
	start     time.Time
	downUntil atomic.Int64
	probing   atomic.Bool

	decisions metric.Int64Counter
	attrs     map[[2]string]metric.AddOption

	// mem remembers denials and refunds, on the local clock (nanos).
	mem *memory

	// now, when set by a test, replaces Redis's clock (in µs), and the
	// local clock too, so that the two agree.
	now func() int64
}

// nanos reads the local clock: ns since the Limiter was made, or the
// test's clock.
func (l *Limiter) nanos() int64 {
	if l.now != nil {
		return l.now() * 1000
	}
	return int64(time.Since(l.start))
}

// testSlack delays expiry, in ms, when a test's clock replaces Redis's:
// Redis expires keys by its own clock, which a test's clock does not move.
const testSlack = 60_000

// allowScript decides one request of KEYS[1]. ARGV: the interval and the
// window in µs; for tests only, the time in µs and a slack in ms added to
// the expiry, as Redis expires keys by its own clock. It returns
// {allowed, retry-after in µs, remaining}.
var allowScript = goredis.NewScript(`
local now
if ARGV[3] then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0) or 0
if tat < now then tat = now end
local nxt = tat + interval
if nxt - now > window then
  return {0, nxt - window - now, 0}
end
redis.call('SET', KEYS[1], string.format('%.0f', nxt), 'PX', math.ceil((nxt - now) / 1000) + tonumber(ARGV[4] or 0))
return {1, 0, math.floor((now + window - nxt) / interval)}
`)

// refundScript moves the TAT of KEYS[1] back one interval, ARGV[1] µs,
// and forgets the key if that gives it its whole burst back. ARGV[2] and
// ARGV[3] are the time and slack of tests, as for allowScript.
var refundScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local now
if ARGV[2] then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tat = (tonumber(v) or 0) - tonumber(ARGV[1])
if tat <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + tonumber(ARGV[3] or 0))
end
return 1
`)

// New returns a Limiter that allows each key a burst of burst requests,
// then rate requests per second, counted in Redis through client (a
// *redis.Client, *redis.ClusterClient or *redis.Ring of go-redis v9).
// rate must be in [MinRate, MaxRate], burst at least 1, and burst/rate at
// most about 71 years. client must honour context deadlines, or a slow
// Redis could hold a call past WithTimeout: for go-redis's own clients,
// set ContextTimeoutEnabled in their options. Every problem found is
// reported, joined, in the error.
func New(client goredis.Scripter, rate float64, burst int, opts ...Option) (*Limiter, error) {
	c := config{prefix: DefaultPrefix, timeout: DefaultTimeout, backoff: DefaultBackoff, maxLocal: DefaultMaxLocalKeys}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	errs := c.errs
	switch cl := client.(type) {
	case nil:
		errs = append(errs, errors.New("redis: New: the client is nil"))
	case *goredis.Client:
		if !cl.Options().ContextTimeoutEnabled {
			errs = append(errs, errContextTimeout)
		}
	case *goredis.ClusterClient:
		if !cl.Options().ContextTimeoutEnabled {
			errs = append(errs, errContextTimeout)
		}
	case *goredis.Ring:
		if !cl.Options().ContextTimeoutEnabled {
			errs = append(errs, errContextTimeout)
		}
	}
	var interval int64
	if !(rate >= MinRate && rate <= MaxRate) {
		errs = append(errs, fmt.Errorf("redis: rate is %v, must be a number in [%g, %g]", rate, MinRate, MaxRate))
	} else {
		interval = int64(math.Round(1e6 / rate))
	}
	switch {
	case burst < 1:
		errs = append(errs, fmt.Errorf("redis: burst is %d, must be >= 1", burst))
	case interval > 0 && float64(interval)*float64(burst) > maxWindow:
		errs = append(errs, fmt.Errorf("redis: burst is %d, must be in [1, %d] at rate %v, as a burst must refill within 71 years",
			burst, maxWindow/interval, rate))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if c.policy == policyFallback && c.fallback == nil {
		g, err := ratelimit.NewKeyed(rate, burst, ratelimit.WithMaxKeys(DefaultFallbackKeys))
		if err != nil {
			return nil, fmt.Errorf("redis: the fallback limiter: %w", err)
		}
		c.fallback = g
	}
	l := &Limiter{
		client:   client,
		interval: interval,
		window:   interval * int64(burst),
		rate:     rate,
		burst:    burst,
		cfg:      c,
		start:    time.Now(),
		attrs:    make(map[[2]string]metric.AddOption),
		mem:      newMemory(c.maxLocal),
	}
	p := c.provider
	if p == nil {
		p = otel.GetMeterProvider()
	}
	var err error
	l.decisions, err = p.Meter("github.com/sluice-go/sluice/redis").Int64Counter(MetricDecisions,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Per-caller quota decisions, by who made them (source) and outcome."))
	if err != nil {
		return nil, fmt.Errorf("redis: creating the decisions metric: %w", err)
	}
	for _, src := range []string{SourceRedis, SourceFallback, SourceFailOpen, SourceFailClosed} {
		for _, out := range []string{"allowed", "rejected"} {
			l.attrs[[2]string{src, out}] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("source", src), attribute.String("outcome", out)))
		}
	}
	return l, nil
}

var errContextTimeout = errors.New("redis: the client ignores context deadlines, so a slow Redis could hold a call past WithTimeout; set ContextTimeoutEnabled: true in its options")

// Rate returns the rate each key is allowed, in requests per second.
func (l *Limiter) Rate() float64 { return l.rate }

// Burst returns the number of requests a rested key may send at once.
func (l *Limiter) Burst() int { return l.burst }

// String describes the limiter's configuration, for logs and errors.
func (l *Limiter) String() string {
	return fmt.Sprintf("redis.Limiter(rate=%g/s, burst=%d)", l.rate, l.burst)
}

// key returns the Redis key of a caller's key: hashed, so that a long or
// hostile key costs Redis a fixed size and cannot name a key of the
// application, behind the prefix.
func (l *Limiter) key(key string) string {
	h := sha256.Sum256([]byte(key))
	return l.cfg.prefix + hex.EncodeToString(h[:16])
}

// Allow is AllowContext without a context of the caller's: the decision
// is still bounded by WithTimeout. It makes Limiter an
// interceptor.CallerLimiter.
func (l *Limiter) Allow(key string) (ratelimit.Decision, error) {
	return l.AllowContext(context.Background(), key)
}

// AllowContext decides whether key may send a request now and, if so,
// counts it, with the semantics of ratelimit.Keyed.Allow: a denied
// request is not counted, and RetryAfter is then the time until the
// request would be allowed, by Redis's clock, to the microsecond.
//
// A denial is remembered until that time: the key's requests meanwhile
// are denied without asking Redis, with the time left, and counted in the
// decisions metric as Redis's, also while Redis is down. The time left is
// measured from when Redis was asked, so it is never longer than Redis's
// own answer would be; refunds of the key given by other replicas
// meanwhile are not seen, and cost it at most that many intervals of
// wait. When the denial ends, one request asks Redis and the others wait
// for the next interval, as Redis would have them do.
//
// When Redis fails or does not answer within WithTimeout (or ctx ends
// first), the failure policy decides, and the error is nil: the decision
// was made, only not by Redis. The error is non-nil only for the empty key
// (ratelimit.ErrEmptyKey).
func (l *Limiter) AllowContext(ctx context.Context, key string) (ratelimit.Decision, error) {
	if key == "" {
		return ratelimit.Decision{}, ratelimit.ErrEmptyKey
	}
	now := l.nanos()
	wait, claimed := l.mem.deniedFor(key, now, l.interval*1000, l.window*1000)
	if wait > 0 {
		l.count(SourceRedis, false)
		return ratelimit.Decision{RetryAfter: time.Duration(wait)}, nil
	}
	if l.tryRedis() {
		d, err := l.allowRedis(ctx, key)
		if err != nil && claimed {
			// Redis did not admit the request the others wait behind: they
			// go to the failure policy, as with no denial remembered.
			l.mem.forgetDenial(key)
		}
		if err != nil && ctx.Err() != nil {
			// The caller gave up: that says nothing of Redis.
			l.probing.Store(false)
		} else {
			l.noteResult(err)
		}
		if err == nil {
			if !d.Allowed && d.RetryAfter > 0 {
				l.mem.deny(key, now, now+int64(d.RetryAfter))
			}
			l.count(SourceRedis, d.Allowed)
			return d, nil
		}
	}
	return l.failed(key)
}

// tryRedis reports whether this decision should ask Redis: yes while it
// answers; after a failure, no until the backoff has passed, then yes for
// one decision at a time until it answers again.
func (l *Limiter) tryRedis() bool {
	until := l.downUntil.Load()
	if until == 0 {
		return true
	}
	if int64(time.Since(l.start)) < until {
		return false
	}
	return l.probing.CompareAndSwap(false, true)
}

// noteResult records whether Redis answered: a failure starts a backoff,
// an answer ends it.
func (l *Limiter) noteResult(err error) {
	if err == nil {
		if l.downUntil.Load() != 0 {
			l.downUntil.Store(0)
		}
	} else {
		l.downUntil.Store(max(1, int64(time.Since(l.start)+l.cfg.backoff)))
	}
	if l.probing.Load() {
		l.probing.Store(false)
	}
}

func (l *Limiter) allowRedis(ctx context.Context, key string) (ratelimit.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	args := []any{l.interval, l.window}
	if l.now != nil {
		args = append(args, l.now(), testSlack)
	}
	res, err := allowScript.Run(ctx, l.client, []string{l.key(key)}, args...).Int64Slice()
	if err != nil {
		return ratelimit.Decision{}, err
	}
	if len(res) != 3 {
		return ratelimit.Decision{}, fmt.Errorf("redis: the script returned %d values, want 3", len(res))
	}
	if res[0] == 1 {
		return ratelimit.Decision{Allowed: true, Remaining: int(res[2])}, nil
	}
	return ratelimit.Decision{RetryAfter: time.Duration(res[1]) * time.Microsecond}, nil
}

// failed decides by the failure policy.
func (l *Limiter) failed(key string) (ratelimit.Decision, error) {
	switch l.cfg.policy {
	case policyOpen:
		l.count(SourceFailOpen, true)
		return ratelimit.Decision{Allowed: true}, nil
	case policyClosed:
		wait := time.Duration(l.downUntil.Load()) - time.Since(l.start)
		if wait <= 0 {
			wait = l.cfg.backoff
		}
		l.count(SourceFailClosed, false)
		return ratelimit.Decision{RetryAfter: wait}, nil
	}
	d, err := l.cfg.fallback.Allow(key)
	if err != nil {
		// The fallback's clock failed: nothing can decide, admit.
		l.count(SourceFailOpen, true)
		return ratelimit.Decision{Allowed: true}, nil
	}
	l.count(SourceFallback, d.Allowed)
	return d, nil
}

func (l *Limiter) count(source string, allowed bool) {
	out := "rejected"
	if allowed {
		out = "allowed"
	}
	l.decisions.Add(context.Background(), 1, l.attrs[[2]string{source, out}])
}

// Refund gives back a request that Allow admitted for key, when a later
// check turned the request away after all. It goes where the decision
// most likely came from: to Redis while Redis answers, to the fallback
// limiter during a backoff; it is lost if Redis fails now, which costs the
// caller one request at most. Refund only what Allow admitted, once.
//
// Refunds of a key are themselves held to the quota's rate and burst, in
// this process: beyond that, the request stays counted. Otherwise a
// caller whose calls a later check rejects (say, while the server is at
// its concurrency limit) would never run out of quota, and each of its
// calls would cost Redis two round trips however many it sent. A caller
// that sends no more than its quota, refunded calls included, loses no
// refund.
func (l *Limiter) Refund(key string) {
	if key == "" {
		return
	}
	if !l.mem.refund(key, l.nanos(), l.interval*1000, l.window*1000) {
		return
	}
	if l.downUntil.Load() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.timeout)
		defer cancel()
		args := []any{l.interval}
		if l.now != nil {
			args = append(args, l.now(), testSlack)
		}
		if err := refundScript.Run(ctx, l.client, []string{l.key(key)}, args...).Err(); err != nil {
			l.noteResult(err)
		}
		return
	}
	if l.cfg.fallback != nil {
		l.cfg.fallback.Refund(key)
	}
}
