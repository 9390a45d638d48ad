package ratelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Bounds of Keyed's configuration.
const (
	// minRate and maxRate bound the rate of a Keyed, in requests per
	// second per key: the interval between requests, 1/rate, is kept in
	// whole nanoseconds, between 1 ns and about 32 years.
	minRate = 1e-9
	maxRate = 1e9

	// maxGCRAWindow bounds burst/rate, the time a key takes to earn its
	// whole burst back, so that it always fits an int64 of nanoseconds
	// next to a clock reading: 2^61 ns is about 73 years.
	maxGCRAWindow = 1 << 61
)

// gcraShards is the number of independently locked parts of the key
// table, so that requests of different keys on different cores seldom
// wait for one another, and a sweep stops only 1/64 of the table at a
// time; a power of two picks the shard with a mask.
const gcraShards = 64

// A Keyed limits the rate of requests of each key (a client, a peer
// address, a tenant) separately, with the generic cell rate algorithm:
// every key may send a burst of up to burst requests at once, and rate
// requests per second after that.
//
// Per key it keeps one number, the theoretical arrival time (TAT): when
// the key's next request would be due if it had sent at exactly the rate.
// A request is allowed if it comes no earlier than burst intervals before
// its TAT, and then moves the TAT one interval later. A key whose TAT has
// passed has its whole burst back, exactly like a key never seen, so
// forgetting it loses nothing: that is what Cleanup does, and why memory
// follows the number of recently active keys, not of all keys ever seen.
//
// Keys are not stored: the table holds a 64-bit hash of each key, with a
// seed drawn at random for each limiter, next to its TAT, about 30 bytes
// a key however long the key is. The seed is secret, so a client cannot
// pick keys that collide with another's; two keys that collide by chance
// (about one pair in 10^10 among 100,000 keys) share one budget.
//
// The table is split into shards, each under a short lock: deciding takes
// one shard's lock for a map lookup and allocates nothing.
//
// Time is the process's monotonic clock, so a change of the wall clock
// neither grants nor withholds requests. Time in a Keyed never runs
// backwards: a clock stepped back grants no key its burst back early.
// See docs/design.md for why GCRA.
//
// All methods are safe for concurrent use.
type Keyed struct {
	// shards come first, so that their padding keeps the fields below,
	// read on every call, off the cache lines of the locks.
	shards [gcraShards]gcraShard

	interval    int64 // 1/rate in ns, >= 1
	window      int64 // burst*interval: a TAT at most this far ahead is allowed
	rate        float64
	burst       int
	clock       clock
	system      bool      // clock is systemClock: read the monotonic clock directly
	epoch       time.Time // origin of readings, in nanoseconds
	seed        maphash.Seed
	maxPerShard int // 0: unbounded

	// latest is the latest reading used, for clocks other than the
	// systemClock, which may step back. The systemClock is monotonic and
	// does without it: a shared word written on every call would tie all
	// cores together.
	latest atomic.Int64
}

// gcraShard is one lock's part of the key table, padded to whole cache
// line pairs so that shards used on different cores share no line.
type gcraShard struct {
	gcraShardState
	_ [128 - unsafe.Sizeof(gcraShardState{})%128]byte
}

type gcraShardState struct {
	mu sync.Mutex
	// tats maps a key's hash to its TAT, in ns since the limiter's epoch.
	tats map[uint64]int64
	// nextExpiry is at most the smallest TAT in the shard: before it, a
	// sweep can free nothing, so a full shard skips to eviction at once.
	nextExpiry int64
}

// A KeyedOption configures a Keyed built by NewKeyed.
type KeyedOption func(*keyedConfig)

type keyedConfig struct {
	clock   clock
	maxKeys int
}

// withClock sets the clock the limiter reads on every call, for tests
// that step it by hand, back, or into failure: a failed reading fails the
// call with that error and leaves the limiter unchanged, and a reading
// earlier than one already used counts as that later one. The default,
// also selected by nil, is systemClock.
func withClock(c clock) KeyedOption {
	return func(g *keyedConfig) { g.clock = c }
}

// WithMaxKeys bounds the number of keys the limiter tracks, so that a
// flood of distinct keys (spoofed client IDs, a scan of addresses) cannot
// grow it without end. 0, the default, means no bound; memory then follows
// the keys active within one burst window, provided Cleanup runs. Each key
// takes about 30 bytes, whatever its length: 100,000 keys fit in a few
// MiB.
//
// The bound is kept per shard, as n/64 rounded up, so the limiter may hold
// a few more than n keys, and a shard may evict while others have room.
//
// A new key is never refused because the table is full: that would let a
// flood of made-up keys lock every real newcomer out. Room is made
// instead, by forgetting the keys that would have their whole burst back
// within one interval: those whose TAT has passed hold no information
// (they behave exactly like keys never seen), the others one request at
// most. If there is none, the key whose TAT is earliest goes: the one that
// would have its whole burst back soonest, so the one whose forgetting
// grants the least. A flood of keys that each sent one request thus
// evicts its own keys before those of callers that spent more of their
// burst.
func WithMaxKeys(n int) KeyedOption {
	return func(g *keyedConfig) { g.maxKeys = n }
}

// NewKeyed returns a limiter that allows each key a burst of burst
// requests, then rate requests per second. rate must be in [1e-9,
// 1e9], burst at least 1, and burst/rate at most about 73 years;
// otherwise the error (one line per wrong value) says which and what is
// allowed.
// The interval between requests, 1/rate, is rounded to the nanosecond: at
// a rate of 3, one request every 333,333,333 ns.
func NewKeyed(rate float64, burst int, opts ...KeyedOption) (*Keyed, error) {
	var c keyedConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	var errs []error
	if !(rate >= minRate && rate <= maxRate) {
		errs = append(errs, badArg("Keyed rate", rate, "a number in [1e-9, 1e9]"))
	}
	var interval int64
	if len(errs) == 0 {
		interval = int64(math.Round(1e9 / rate))
	}
	switch {
	case burst < 1:
		errs = append(errs, badArg("Keyed burst", burst, ">= 1"))
	case len(errs) == 0 && float64(interval)*float64(burst) > maxGCRAWindow:
		errs = append(errs, badArg("Keyed burst", burst,
			fmt.Sprintf("in [1, %d] at rate %v, as a burst must refill within 73 years", maxGCRAWindow/interval, rate)))
	}
	if c.maxKeys < 0 {
		errs = append(errs, badArg("Keyed max keys", c.maxKeys, ">= 0, 0 for no bound"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	g := &Keyed{
		interval:    interval,
		window:      interval * int64(burst),
		rate:        rate,
		burst:       burst,
		clock:       c.clock,
		seed:        maphash.MakeSeed(),
		maxPerShard: c.maxKeys / gcraShards,
	}
	if c.maxKeys%gcraShards != 0 {
		g.maxPerShard++ // rounded up, without overflow
	}
	if _, ok := g.clock.(systemClock); ok || g.clock == nil {
		g.clock, g.system = systemClock{}, true
		g.epoch = time.Now()
	} else if t, err := g.clock.Now(); err == nil {
		g.epoch = t // keeps readings small whatever era the clock is in
	} else {
		g.epoch = time.Unix(0, 0)
	}
	g.latest.Store(math.MinInt64)
	for i := range g.shards {
		g.shards[i].tats = make(map[uint64]int64)
		g.shards[i].nextExpiry = math.MaxInt64
	}
	return g, nil
}

// Rate returns the rate each key is allowed, in requests per second.
func (g *Keyed) Rate() float64 { return g.rate }

// Burst returns the number of requests a rested key may send at once.
func (g *Keyed) Burst() int { return g.burst }

// nanos reads the clock as nanoseconds since g.epoch. It returns the
// reading, by which waits are measured, and the time the limiter moves by,
// which is the reading unless the clock stepped back behind a reading
// already used.
func (g *Keyed) nanos() (read, now int64, err error) {
	if g.system {
		read = int64(time.Since(g.epoch))
		return read, read, nil
	}
	t, err := g.clock.Now()
	if err != nil {
		return 0, 0, fmt.Errorf("ratelimit: Keyed clock: %w", err)
	}
	read = offset(t, g.epoch)
	for {
		latest := g.latest.Load()
		if read <= latest {
			return read, latest, nil
		}
		if g.latest.CompareAndSwap(latest, read) {
			return read, read, nil
		}
	}
}

// hash returns key's hash and the shard it belongs to.
func (g *Keyed) hash(key string) (uint64, *gcraShard) {
	h := maphash.String(g.seed, key)
	return h, &g.shards[h&(gcraShards-1)]
}

// Allow decides whether key may send a request now and, if so, counts it.
// A denied request is not counted: a client retrying too early does not
// push its own next chance further away. Decision.RetryAfter is then the
// exact time until the request would be allowed.
//
// The error is non-nil only when no decision could be made: ErrEmptyKey
// (or a clock's failure, which the system clock never has). The caller
// chooses whether to fail open or closed then. A full key table (WithMaxKeys) never denies a new key:
// it forgets another.
func (g *Keyed) Allow(key string) (Decision, error) {
	if key == "" {
		return Decision{}, ErrEmptyKey
	}
	read, now, err := g.nanos()
	if err != nil {
		return Decision{}, err
	}
	h, s := g.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	tat, ok := s.tats[h]
	if !ok {
		if g.maxPerShard > 0 && len(s.tats) >= g.maxPerShard {
			s.makeRoomLocked(now, g.interval)
		}
		tat = now
	}
	next := max(tat, now) + g.interval
	if next-now > g.window {
		// The state moves by now, which never goes back; the wait is
		// measured from read, the clock's own time, to be exact by it.
		return Decision{RetryAfter: time.Duration(next - g.window - read)}, nil
	}
	s.tats[h] = next
	if !ok {
		s.nextExpiry = min(s.nextExpiry, next)
	}
	return Decision{Allowed: true, Remaining: int((now + g.window - next) / g.interval)}, nil
}

// Refund gives back a request that Allow admitted for key, when a later
// check turned the request away after all: a request that was not served
// should not count against its key. It moves the key's TAT back one
// interval. A key forgotten meanwhile has its whole burst already, and a
// key with more than its burst cannot be made, so there is nothing to do
// for either. Refund only what Allow admitted, once.
func (g *Keyed) Refund(key string) {
	if key == "" {
		return
	}
	h, s := g.hash(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if tat, ok := s.tats[h]; ok {
		// nextExpiry must stay a lower bound of the shard's TATs.
		s.tats[h] = tat - g.interval
		s.nextExpiry = min(s.nextExpiry, tat-g.interval)
	}
}

// makeRoomLocked frees at least one slot in a full shard. It forgets
// every key that will have its whole burst back within one interval
// (those whose TAT has passed hold no information at all; the others, one
// request at most), or if there is none, the key with the earliest TAT.
// Dropping all such keys in one pass keeps a flood of one-request keys
// from costing a scan of the shard per new key.
func (s *gcraShard) makeRoomLocked(now, interval int64) {
	var (
		removed int
		victim  uint64
		first   = int64(math.MaxInt64)
	)
	for h, tat := range s.tats {
		if tat <= now+interval {
			delete(s.tats, h)
			removed++
		} else if tat < first {
			first, victim = tat, h
		}
	}
	if removed == 0 && first != math.MaxInt64 {
		delete(s.tats, victim)
	}
	// first is at most every TAT left: a lower bound, as nextExpiry must
	// be.
	s.nextExpiry = first
}

// sweepLocked removes the keys whose TAT is not after now, which have
// their whole burst back and so behave exactly as absent keys, and
// returns how many it removed.
func (s *gcraShard) sweepLocked(now int64) int {
	removed := 0
	next := int64(math.MaxInt64)
	for h, tat := range s.tats {
		if tat <= now {
			delete(s.tats, h)
			removed++
		} else {
			next = min(next, tat)
		}
	}
	s.nextExpiry = next
	if removed > len(s.tats) {
		// A map keeps the room it once needed: after a flood has gone,
		// give that memory back.
		s.tats = maps.Clone(s.tats)
	}
	return removed
}

// Cleanup forgets every key that has its whole burst back. Those keys
// behave exactly like keys never seen, so Cleanup changes no decision; it
// only frees their memory. It locks one shard at a time, briefly, and
// returns the number of keys removed (the error is that of a failed
// clock, which the system clock never is).
//
// Call it periodically, from a goroutine with a ticker: once
// per burst window (burst/rate) keeps the table at about the keys active
// within the last window.
func (g *Keyed) Cleanup() (int, error) {
	_, now, err := g.nanos()
	if err != nil {
		return 0, err
	}
	removed := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		if now >= s.nextExpiry {
			removed += s.sweepLocked(now)
		}
		s.mu.Unlock()
	}
	return removed, nil
}

// Len returns the number of keys the limiter tracks now, for metrics and
// tests. It locks each shard in turn, so under concurrent use the count is
// approximate.
func (g *Keyed) Len() int {
	n := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		n += len(s.tats)
		s.mu.Unlock()
	}
	return n
}
