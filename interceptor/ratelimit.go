package interceptor

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/bucket"
	"github.com/sluice-go/sluice/limiter"
	"github.com/sluice-go/sluice/ratelimit"
)

// A RateLimit caps how many calls per second are admitted, beside the
// concurrency limit. A full bucket admits Burst calls at once, then calls
// are admitted at PerSecond . The zero RateLimit
// imposes none.
//
// A concurrency limit adapts to what the service can do now; a rate limit
// is a fixed contract (a quota, a fair share, a downstream's published
// rate). Use both when both apply: the rate limit is checked first, so a
// call over its rate costs no permit.
type RateLimit struct {
	// PerSecond is the sustained rate in calls per second; 0 turns the
	// rate limit off. A rejected call is told when to retry in whole
	// milliseconds of an int32 (gRFC A6): a wait longer than that, about
	// 24.8 days, as at rates below one call in 24.8 days, is sent as
	// 24.8 days.
	PerSecond float64
	// Burst is how many calls a full bucket admits at once; 0 means one
	// second's worth, max(1, PerSecond).
	Burst int
}

func (r RateLimit) enabled() bool { return r != RateLimit{} }

func (r RateLimit) burst() int {
	if r.Burst != 0 {
		return r.Burst
	}
	return max(1, int(math.Min(r.PerSecond, limiter.MaxLimit)))
}

// describe names r in rejections: "10/s (burst 20)".
func (r RateLimit) describe() string {
	return fmt.Sprintf("%g/s (burst %d)", r.PerSecond, r.burst())
}

// anonymous is the GCRA key of calls whose callerkey.Func returned "". Real keys
// come from metadata or addresses, which never contain a NUL byte.
const anonymous = "\x00anonymous"

// defaultMaxCallers bounds the callers a configuration file's caller_limit
// tracks at once unless its max_callers says otherwise. Callers are kept
// as 64-bit hashes of their keys, about 30 bytes each: 100,000 take a few
// MiB.
const defaultMaxCallers = 100_000

// A CallerLimiter decides per-caller quotas for WithCallerLimiter:
// ratelimit.Keyed, a quota of this process in bounded memory, and the
// redis module's limiter, one quota for a whole fleet, are CallerLimiters.
// Allow decides and counts one call of key (an error means no decision
// could be made, and the call is let through; the concurrency limit still
// protects), and Refund gives back a call Allow admitted that a later
// check rejected. Both are called by the interceptors for every call,
// concurrently: they must be safe for concurrent use and bounded in time.
// They are never called on a connection's reader (WithEarlyRejection's
// tap), which must not wait on a remote store.
type CallerLimiter interface {
	Allow(key string) (ratelimit.Decision, error)
	Refund(key string)
}

// WithCallerLimiter gives each caller, as named by key, the quota l
// decides, on top of the method limits:
//
//	quota, err := ratelimit.NewKeyed(20, 40) // per caller: 20 calls a second, bursts of 40
//	...
//	interceptor.WithCallerLimiter(callerkey.Metadata("x-api-key"), quota)
//
// The quota is checked before the method's rate and its concurrency
// limit, so a caller over its quota spends nothing the method's other
// callers share; a call a later check rejects gets its caller's token
// back. Rejected calls get RESOURCE_EXHAUSTED with the exact retry-after,
// in the grpc-retry-pushback-ms trailer and as a google.rpc.RetryInfo
// detail. l bounds its own memory (ratelimit.WithMaxKeys), so that a flood
// of made-up caller keys cannot exhaust it. A Reload keeps the state of l,
// which it does not own.
func WithCallerLimiter(key callerkey.Func, l CallerLimiter) ServerOption {
	return serverOption(func(c *config) {
		switch {
		case key == nil:
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithCallerLimiter: the callerkey.Func is nil; use callerkey.PeerIP, callerkey.PeerIdentity, a callerkey.IP, callerkey.Metadata or a func of your own"))
		case l == nil:
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithCallerLimiter: the CallerLimiter is nil; use a ratelimit.Keyed for a quota of this process"))
		default:
			c.callerKey, c.callerRate, c.callerLimiter = key, RateLimit{}, l
		}
	})
}

// callerRateLimit is a configuration file's caller_limit: a quota of r
// per caller in a ratelimit.Keyed of this process, tracking at most
// maxCallers (0: defaultMaxCallers). A Reload with the same r and
// maxCallers keeps the callers' state.
func callerRateLimit(key callerkey.Func, r RateLimit, maxCallers int) ServerOption {
	return serverOption(func(c *config) {
		c.callerKey, c.callerRate, c.callerLimiter, c.maxCallers = key, r, nil, maxCallers
	})
}

type callerLimit struct {
	key        callerkey.Func
	rate       RateLimit
	maxCallers int
	gcra       *ratelimit.Keyed // a file's quota of this process, nil with WithCallerLimiter
	lim        CallerLimiter    // decides: gcra, or WithCallerLimiter's
	what       string           // the quota, as rejections describe it
}

func newCallerLimit(c *config) (*callerLimit, error) {
	if c.callerKey == nil {
		return nil, nil
	}
	if c.callerLimiter != nil {
		what := "caller quota exceeded"
		if s, ok := c.callerLimiter.(fmt.Stringer); ok {
			what = fmt.Sprintf("caller quota %s exceeded", s)
		}
		return &callerLimit{key: c.callerKey, lim: c.callerLimiter, what: what}, nil
	}
	if !c.callerRate.enabled() {
		return nil, fmt.Errorf("interceptor: caller limit: RateLimit.PerSecond is 0, must be > 0")
	}
	maxCallers := c.maxCallers
	if maxCallers == 0 {
		maxCallers = defaultMaxCallers
	}
	g, err := ratelimit.NewKeyed(c.callerRate.PerSecond, c.callerRate.burst(), ratelimit.WithMaxKeys(maxCallers))
	if err != nil {
		return nil, fmt.Errorf("interceptor: caller limit: %w", err)
	}
	return &callerLimit{key: c.callerKey, rate: c.callerRate, maxCallers: maxCallers, gcra: g, lim: g,
		what: "caller rate limit " + c.callerRate.describe() + " exceeded"}, nil
}

// newBucket returns the token bucket of a Limit, nil if it has no rate.
func newBucket(r RateLimit) (*bucket.Bucket, error) {
	if !r.enabled() {
		return nil, nil
	}
	return bucket.New(r.PerSecond, r.burst())
}

// take charges the caller of a call of fullMethod one token of its quota.
// It reports false, with how long the caller must wait, when the caller is
// over its quota; otherwise what it took.
func (cl *callerLimit) take(ctx context.Context, fullMethod string) (ch charged, after time.Duration, ok bool) {
	key := cl.key(ctx, fullMethod)
	if key == "" {
		key = anonymous
	}
	d, err := cl.lim.Allow(key)
	// An error means no decision (the clock failed): let the call through
	// rather than fail every call; the concurrency limit still protects.
	if err != nil {
		return charged{}, 0, true
	}
	if !d.Allowed {
		return charged{}, d.RetryAfter, false
	}
	return charged{gcra: cl.lim, key: key}, 0, true
}

// charged is what checkRates took for a call: tokens to give back if a
// later check turns the call away, so that a call not served spends
// neither its caller's quota nor the method's rate.
type charged struct {
	bucket *bucket.Bucket
	gcra   CallerLimiter
	key    string
}

// refund gives back what was taken.
func (ch charged) refund() {
	if ch.bucket != nil {
		ch.bucket.Refund()
	}
	if ch.gcra != nil {
		ch.gcra.Refund(ch.key)
	}
}

// checkRates applies the caller limit, then r's rate limit, before a call
// takes a permit (see takeRates). It returns what it took, or the
// rejection.
func (c *core) checkRates(ctx context.Context, r *route) (charged, *rejection) {
	ch, refused, ok := takeRates(ctx, r.t.callers, r.full, r.gate.bucket, r.gate.rate)
	if !ok {
		return charged{}, c.rateReject(ctx, r, refused.reason, refused.after, refused.what)
	}
	return ch, nil
}

// A rateRefusal says which rate turned a call away, and for how long.
type rateRefusal struct {
	reason string // reasonCallerRate or reasonRate
	after  time.Duration
	what   string // the rate, as rejections describe it
}

// takeRates charges a call of fullMethod to its caller's quota (cl, if
// any), then to the shared bucket (if any). The caller's quota comes
// first: a caller over it must not spend the rate every other caller
// shares. A token taken by one check is given back when a later one
// rejects the call. It returns what it took, or why it refused.
func takeRates(ctx context.Context, cl *callerLimit, fullMethod string, shared *bucket.Bucket, rate RateLimit) (charged, rateRefusal, bool) {
	var ch charged
	if cl != nil {
		var after time.Duration
		var ok bool
		if ch, after, ok = cl.take(ctx, fullMethod); !ok {
			return charged{}, rateRefusal{reasonCallerRate, after, cl.what}, false
		}
	}
	if shared != nil {
		if after, ok := shared.Take(); !ok {
			ch.refund()
			return charged{}, rateRefusal{reasonRate, after, "rate limit " + rate.describe() + " exceeded"}, false
		}
		ch.bucket = shared
	}
	return ch, rateRefusal{}, true
}

// maxRetryAfter is the longest wait the pushback trailer can carry: gRFC
// A6 sends it as an int32 of milliseconds, about 24.8 days.
const maxRetryAfter = maxPushbackMillis * time.Millisecond

// rateReject builds the rejection of a call over a rate: the pushback is
// the exact wait, rounded up to whole milliseconds so that a client that
// honours it is not early, and a RetryInfo detail says the same. A wait
// longer than maxRetryAfter (a rate below about one call in 24.8 days) is
// sent as maxRetryAfter: rounding it up used to wrap it negative, which
// the trailer reads as "do not retry". A negative wait, which only a
// CallerLimiter of the user's could return, is sent as 0.
func (c *core) rateReject(ctx context.Context, r *route, reason string, after time.Duration, what string) *rejection {
	c.rejectedFor(ctx, r, reason)
	after = min(max(after, 0), maxRetryAfter)
	if rem := after % time.Millisecond; rem != 0 {
		after += time.Millisecond - rem
	}
	st := status.Newf(codes.ResourceExhausted, "sluice: %s rejected /%s: %s, retry after %v", c.side, r.method, what, after)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		st = withInfo
	}
	return &rejection{err: st.Err(), pushback: after}
}
