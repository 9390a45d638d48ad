package redis

import (
	"hash/maphash"
	"math"
	"sync"
)

// memoryShards is the number of independently locked parts of a
// Limiter's local memory, as in ratelimit.Keyed: calls of different
// callers seldom wait for one another, and making room stops 1/64 of the
// table at a time.
const memoryShards = 64

// memory is what a Limiter keeps of its callers in this process, so that
// a caller over its quota costs Redis nothing: when Redis said it may
// next pass, and how many refunds it has had. Keys are stored as 64-bit
// hashes with a seed secret to the process, about 40 bytes a caller
// however long its key, and each shard holds at most maxPerShard callers,
// so that a caller cannot grow the table by varying its key. Two keys
// that collide by chance (about one pair in 10^10 among 100,000 keys)
// share an entry, as they share a budget in ratelimit.Keyed.
//
// Forgetting a denial never admits a call Redis would deny: it costs one
// round trip more. Forgetting a refund count lets the caller have up to a
// burst of refunds again. So the table makes room by forgetting whatever
// holds least.
type memory struct {
	seed        maphash.Seed
	maxPerShard int
	shards      [memoryShards]memoryShard
}

type memoryShard struct {
	mu sync.Mutex
	m  map[uint64]memo
}

// memo is one caller's entry. Times are ns on the Limiter's local clock.
type memo struct {
	// denied is when Redis will admit the caller's next call: until then,
	// every call of it is denied without asking. 0 if Redis denied none.
	denied int64
	// refunds is the theoretical arrival time of the caller's refunds,
	// kept to the quota's own rate and burst (see Limiter.Refund).
	refunds int64
}

// until is when the entry holds nothing any more: a caller with neither a
// denial nor refunds pending is the same as a caller never seen.
func (e memo) until() int64 { return max(e.denied, e.refunds) }

func newMemory(maxKeys int) *memory {
	m := &memory{seed: maphash.MakeSeed(), maxPerShard: (maxKeys + memoryShards - 1) / memoryShards}
	for i := range m.shards {
		m.shards[i].m = make(map[uint64]memo)
	}
	return m
}

func (m *memory) shard(key string) (uint64, *memoryShard) {
	h := maphash.String(m.seed, key)
	return h, &m.shards[h&(memoryShards-1)]
}

// deniedFor returns how long, at now, the caller of key is still denied
// by a denial Redis gave; 0 if Redis is to be asked, and then whether
// this call is the one the others wait behind.
//
// In the first interval (ns) after a denial ends, Redis admits one call
// of the caller, and denies the others until its next: the call that
// finds the denial ended asks Redis, and the denial is moved on for the
// others, which need not ask. Concurrent calls of a caller thus cost
// Redis one round trip per interval, not one each. Should Redis deny
// that call after all (another replica took the interval), its answer
// replaces the guess.
func (m *memory) deniedFor(key string, now, interval, window int64) (wait int64, claimed bool) {
	h, s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[h]
	switch {
	case !ok:
		return 0, false
	case now < e.denied:
		return e.denied - now, false
	case e.denied != 0 && now < e.denied+interval:
		// The GCRA after one admission at now. With a burst of 1 the
		// key's TAT has passed, so the next interval counts from now.
		e.denied = max(e.denied+interval, now+2*interval-window)
		s.m[h] = e
		return 0, true
	case e.refunds <= now:
		delete(s.m, h) // spent: the table follows the callers it still stops
	}
	return 0, false
}

// forgetDenial forgets the denial remembered for the caller of key.
func (m *memory) forgetDenial(key string) {
	h, s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[h]; ok {
		e.denied = 0
		s.m[h] = e
	}
}

// deny remembers that Redis denies the caller of key until until.
func (m *memory) deny(key string, now, until int64) {
	h, s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[h]
	if !ok {
		s.makeRoomLocked(m.maxPerShard, now)
	}
	e.denied = until
	s.m[h] = e
}

// refund reports whether the caller of key may have one more call given
// back at now: refunds follow the quota's own rate and burst (interval
// and window, in ns), so a caller gets back at most what its quota would
// have admitted. A refund moves the caller's TAT in Redis back, so the
// denial remembered, if any, no longer holds and is forgotten.
func (m *memory) refund(key string, now, interval, window int64) bool {
	h, s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[h]
	next := max(e.refunds, now) + interval
	if next-now > window {
		return false
	}
	if !ok {
		s.makeRoomLocked(m.maxPerShard, now)
	}
	e.refunds, e.denied = next, 0
	s.m[h] = e
	return true
}

// makeRoomLocked frees a slot in a full shard: it forgets every entry
// that holds nothing any more, or if there is none, the one that would
// soonest: that one costs least to forget.
func (s *memoryShard) makeRoomLocked(maxPerShard int, now int64) {
	if len(s.m) < maxPerShard {
		return
	}
	var (
		removed int
		victim  uint64
		first   = int64(math.MaxInt64)
	)
	for h, e := range s.m {
		switch u := e.until(); {
		case u <= now:
			delete(s.m, h)
			removed++
		case u < first:
			first, victim = u, h
		}
	}
	if removed == 0 {
		delete(s.m, victim)
	}
}

// len returns the number of callers remembered, for tests.
func (m *memory) len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
