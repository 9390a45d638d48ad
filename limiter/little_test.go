package limiter

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// steadyLittle returns the default rule past its first probes, at limit
// with b = 10 ms (its median too) known from many calls and quiet RTTs,
// and the time its next round trip opens.
func steadyLittle(t *testing.T, limit float64) (*little, time.Time) {
	t.Helper()
	l := newLittle(AIMDConfig{}, true)
	l.phase, l.probes = steady, 2
	l.limit, l.b, l.bMedian, l.nb, l.bAt = limit, 10*time.Millisecond, 10*time.Millisecond, 100, t0
	l.cv, l.spreadMean, l.spreadVar = 0.1, 10_000, 1_000_000
	l.publishLocked()
	return l, t0.Add(time.Second)
}

// TestLittleRule walks one round trip of 10 calls through the rule.
func TestLittleRule(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		rtt      time.Duration
		inflight int // every call's, at grant
		drops    int
		want     float64
		limit    float64 // before the round trip
		peak     int     // one call's in flight, if not 0
	}{
		// Full and late: c = m·b/r = 40·10/20 = 20, half way down to 1.3·c.
		{"full and late", 20 * ms, 40, 0, 40 + 0.5*(1.3*20-40), 40, 0},
		// Full and on time: up to 1.3·c = 1.3·40.
		{"full and on time", 10 * ms, 40, 0, 52, 40, 0},
		// Every call 2 ms slower than b's median, the mean within 1.3·b:
		// a queue by the sign test. c = 37·10/12, 1.3·c is the limit.
		{"every call slower, near the limit", 12 * ms, 37, 0, 40, 40, 0},
		// The load, not the limit, set the RTT: nothing moves.
		{"late, not full", 30 * ms, 20, 0, 40, 40, 0},
		{"on time, light", 10 * ms, 10, 0, 40, 40, 0},
		// On time below the limit: room for bursts of the load's size,
		// 1.3 × the most in flight; not if a call overran.
		{"on time, not reached", 10 * ms, 34, 0, 1.3 * 34, 40, 0},
		{"on time, not reached, one drop", 10 * ms, 34, 1, 40, 40, 0},
		{"on time, not reached, a burst to 35", 10 * ms, 30, 0, 1.3 * 35, 40, 35},
		// r is the time in flight per success: 100 ms / 9 calls, and c
		// falls with the share of calls that succeeded.
		{"full, one drop", 10 * ms, 40, 1, 1.3 * 40 * 9 / 10, 40, 0},
		// Nothing succeeded: late, and c unknown: the target is half the
		// limit, and the limit moves half way down to it.
		{"all dropped", 10 * ms, 40, 10, 30, 40, 0},
		// Most calls dropped in a round trip that reached the limit: it let
		// in too many, though most were granted below it (m = 22). c =
		// 22·10/(100/3) = 6.6. Below the limit, drops cut nothing.
		{"reached, most dropped", 10 * ms, 20, 7, 40 + 0.5*(1.3*6.6-40), 40, 40},
		{"not reached, most dropped", 10 * ms, 20, 7, 40, 40, 0},
		// A full limit grows to 1.3·c = 5.2, not past it: a queue of t·c
		// is what c allows.
		{"full and on time, small limit", 10 * ms, 4, 0, 5.2, 4, 0},
		// At a limit of 4, 10 calls are 2.5 round trips: a limit that
		// bursts reach but the mean does not fill grows by one per round
		// trip at least, past 1.3·c = 1.3·2.2.
		{"reached, small limit", 10 * ms, 2, 0, 4 + 10.0/4, 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, tt.limit)
			trip := roundTrip(at, tt.rtt, 10, tt.inflight, Success)
			for i := range tt.drops {
				trip[i].Outcome = Dropped
			}
			if tt.peak != 0 {
				trip[len(trip)-1].Inflight = tt.peak
			}
			feed(l, trip)
			assert.InDelta(t, tt.want, l.limit, 1e-6)
		})
	}
}

// TestLittleOverrunCloses: a round trip ends once a call granted after it
// opened is back, or once most of its calls are drops: calls granted
// before it that overran tell of overload a deadline sooner. Not after a
// round trip that cut the limit: those drops tell of the limit before the
// cut, and closing on each handful of them cut it again and again (two
// methods with processor sharing at 5×, C = 128: 1.00 → 0.75 of ideal).
func TestLittleOverrunCloses(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		drops    int  // of 10 calls granted before the round trip opened, 40 in flight
		afterCut bool // the round trip before cut the limit
		want     float64
		closed   bool
	}{
		// Full and late: r = 100/3 ms, c = 40·10/r = 12, half way down to 1.3·c.
		{"most dropped: over, and cut", 7, false, 40 + 0.5*(1.3*12-40), true},
		{"some dropped: waits for a call of its own", 3, false, 40, false},
		{"most dropped after a cut: waits for a call of its own", 7, true, 40, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.win.opened = at
			if tt.afterCut {
				l.cutAt = at
			}
			trip := roundTrip(at.Add(-5*ms), 10*ms, 10, 40, Success)
			for i := range tt.drops {
				trip[i].Outcome = Dropped
			}
			feed(l, trip)
			assert.InDelta(t, tt.want, l.limit, 1e-6)
			assert.Equal(t, tt.closed, l.win.n == 0, "round trip over")
		})
	}
}

// TestLittleRoomForBursts: an on-time round trip below the limit keeps
// the limit 1.3 × the most calls it had in flight, against a start's b
// too: a start's round trips that reach the limit on time grow it
// anyway, and those below it would refuse the load's bursts meanwhile.
func TestLittleRoomForBursts(t *testing.T) {
	tests := []struct {
		name        string
		unconfirmed bool
		want        float64
	}{
		{"b confirmed", false, 1.3 * 34},
		{"b unconfirmed", true, 1.3 * 34},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.unconfirmed = tt.unconfirmed
			feed(l, roundTrip(at, 10*time.Millisecond, 10, 34, Success))
			assert.InDelta(t, tt.want, l.limit, 1e-6)
		})
	}
}

// TestLittleLightLoadConfirms: a start's b is confirmed by round trips in
// a row that held nothing back and read b to (1+t)·b, as many calls as
// the largest probe times, as an agreeing probe from below would: the
// start met no queue that these calls miss. Left unconfirmed at light
// load, the first burst to fill the limit cut it all the way and set off
// probes at half depth that held a C = 8, S = 200 ms downstream at 3 of 8
// permits for 1.7 s.
func TestLittleLightLoadConfirms(t *testing.T) {
	ms := time.Millisecond
	type trip struct {
		rtt     time.Duration
		reached bool // one call found the limit full
	}
	run := func(n int, tr trip) []trip { return slices.Repeat([]trip{tr}, n) }
	tests := []struct {
		name          string
		trips         []trip
		wantConfirmed bool
	}{
		{"128 calls at b to (1+t)·b", run(13, trip{11 * ms, false}), true},
		{"120 calls: not yet", run(12, trip{11 * ms, false}), false},
		{"at b exactly", run(13, trip{10 * ms, false}), true},
		{"below b: b may hold a queue", run(13, trip{9 * ms, false}), false},
		{"a late one breaks the run", slices.Concat(run(6, trip{11 * ms, false}), run(1, trip{14 * ms, false}), run(6, trip{11 * ms, false})), false},
		{"they reached the limit", run(13, trip{11 * ms, true}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.unconfirmed = true
			for _, tr := range tt.trips {
				samples := roundTrip(at, tr.rtt, 10, 10, Success)
				if tr.reached {
					samples[len(samples)-1].Inflight = int(l.limit)
				}
				feed(l, samples)
				at = at.Add(tr.rtt)
			}
			assert.Equal(t, tt.wantConfirmed, !l.unconfirmed)
		})
	}
}

// TestLittleLateMovesTheMedian: a full round trip is late if more than
// half its calls are slower than b's median, by a standard error with its
// mean late or by three without: a queue delays every call, while a mean
// made late by a few slow calls (a cache's misses) is the shape of the
// RTTs, not a queue, and a mean on time with every call slower is a queue
// whose slow calls have not returned.
func TestLittleLateMovesTheMedian(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		fast int           // of the 10 calls, at 5 ms; the rest at slow
		slow time.Duration // the rest's RTT
		want float64
		// b from a start not yet confirmed
		unconfirmed bool
	}{
		// 3 calls of 10 slower than 10 ms: on time, and c = 40·10/17 is
		// below the limit: one more.
		{"a slow tail: on time", 7, 45 * ms, 41, false},
		{"every call slower: late", 0, 17 * ms, 40 + 0.5*(1.3*40*10/17.0-40), false},
		// r = 12 ms is within 1.3·b, but every call is slower than b's
		// median, past one half by three standard errors: a queue whose
		// slow calls are not back yet (a round trip reads the fast ones
		// first). c = 40·10/12 and 1.3·c = 43.3: late, so no growth.
		{"every call slower, the mean on time: late", 0, 12 * ms, 40, false},
		// Not on a start's b, which may come from a quieter process than
		// the one now (a fresh client whose own calls load its CPU): on
		// time, up to 1.3·c.
		{"every call slower, the mean on time, b unconfirmed: on time", 0, 12 * ms, 1.3 * 40 * 10 / 12.0, true},
		// Half the calls slower, r = 12.9 ms: on time, and 1.3·c = 40.3
		// is within one of the limit: one more.
		{"half slower, near the limit: one at least", 5, 20800 * time.Microsecond, 41, false},
		// 6 of 10 slower is not past one half by a standard error
		// (0.5 + 0.5·√(1/10 + 1/100) = 0.67).
		{"slightly more than half slower: on time", 4, 25 * ms, 41, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.unconfirmed = tt.unconfirmed
			trip := roundTrip(at, tt.slow, 10, 40, Success)
			for i := range tt.fast {
				trip[i].RTT, trip[i].At = 5*ms, at.Add(5*ms)
			}
			feed(l, trip)
			assert.InDelta(t, tt.want, l.limit, 1e-6)
		})
	}
}

// TestLittleLateBelowTheLimit: a round trip the limit never came near
// whose mean is late re-measures an unconfirmed b, which a start may have
// taken from its fast calls only, even if its median is on time: with
// nothing held back, a late mean is a tail b missed, not a queue. A
// confirmed b, or a round trip that reached the limit, says nothing
// about b. The limit stays where it was.
func TestLittleLateBelowTheLimit(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name        string
		unconfirmed bool
		peak        int // one call's in flight, if not 0
		fast        int // of the 10 calls at 30 ms, made 5 ms and the rest 55 ms: r 30 ms, median 5 ms
		wantB       time.Duration
	}{
		// b of 10 calls at 10 ms and 10 calls at 30 ms: 20 ms.
		{"b unconfirmed", true, 0, 0, 20 * ms},
		{"b unconfirmed, a slow tail only", true, 0, 5, 20 * ms},
		{"b confirmed", false, 0, 0, 10 * ms},
		{"b confirmed, a slow tail only", false, 0, 5, 10 * ms},
		{"b unconfirmed, the limit reached", true, 40, 0, 10 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.unconfirmed, l.nb = tt.unconfirmed, 10
			trip := roundTrip(at, 30*ms, 10, 20, Success)
			for i := range tt.fast {
				trip[i].RTT, trip[i].At = 5*ms, at.Add(5*ms)
				trip[len(trip)-1-i].RTT, trip[len(trip)-1-i].At = 55*ms, at.Add(55*ms)
			}
			if tt.peak != 0 {
				trip[len(trip)-1].Inflight = tt.peak
			}
			feed(l, trip)
			assert.Equal(t, tt.wantB, l.b)
			assert.InDelta(t, 40, l.limit, 1e-6)
		})
	}
}

// TestLittlePhases checks each transition between the phases.
func TestLittlePhases(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		setup func(l *little)
		trip  func(at time.Time) []Sample
		want  phase
	}{
		{"steady stays steady", nil,
			func(at time.Time) []Sample { return roundTrip(at, 10*ms, 10, 40, Success) }, steady},
		{"b 30 s old, full: probe", func(l *little) { l.bAt = t0.Add(-30 * time.Second) },
			func(at time.Time) []Sample { return roundTrip(at, 10*ms, 10, 40, Success) }, probing},
		{"b 30 s old, not full: no probe", func(l *little) { l.bAt = t0.Add(-30 * time.Second) },
			func(at time.Time) []Sample { return roundTrip(at, 10*ms, 10, 5, Success) }, steady},
		{"b 1500 b's old but not 30 s, full: no probe", func(l *little) { l.bAt = t0.Add(-27 * time.Second) },
			func(at time.Time) []Sample { return roundTrip(at, 10*ms, 10, 40, Success) }, steady},
		{"b 30 s old but not 1500 b's, full: no probe", func(l *little) {
			l.b, l.bMedian, l.bAt = 100*ms, 100*ms, t0.Add(-time.Minute)
		}, func(at time.Time) []Sample { return roundTrip(at, 100*ms, 10, 40, Success) }, steady},
		{"b 1500 b's old, full: probe", func(l *little) {
			l.b, l.bMedian, l.bAt = 100*ms, 100*ms, t0.Add(-150*time.Second)
		}, func(at time.Time) []Sample { return roundTrip(at, 100*ms, 10, 40, Success) }, probing},
		{"after the start, full and on time: no probe", func(l *little) { l.unconfirmed = true },
			func(at time.Time) []Sample { return roundTrip(at, 10*ms, 10, 40, Success) }, steady},
		{"b on too few calls, late: probe", func(l *little) { l.nb = 2 },
			func(at time.Time) []Sample { return roundTrip(at, 20*ms, 10, 40, Success) }, probing},
		{"b on too few calls, on time: no probe", func(l *little) { l.nb = 2 },
			func(at time.Time) []Sample { return roundTrip(at, 10*ms, 10, 40, Success) }, steady},
		{"limit halved since the last probe: probe", func(l *little) { l.probedAt = 100 },
			func(at time.Time) []Sample { return roundTrip(at, 30*ms, 10, 40, Success) }, probing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			if tt.setup != nil {
				tt.setup(l)
			}
			feed(l, tt.trip(at))
			assert.Equal(t, tt.want, l.phase)
			if tt.want == probing {
				assert.Less(t, l.Limit(), 40, "a probe lowers the limit")
			}
		})
	}
}

// TestLittleProbeEnds checks what a probe's mean does to b, the limit and
// the phase, from a b of 10 ms measured at a probe limit of 20.
func TestLittleProbeEnds(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		start     bool            // b is the start's
		depth     int             // the probe's limit
		mean      time.Duration   // of its 16 calls; 0 if all were dropped
		rtts      []time.Duration // its calls instead, if not nil
		overruns  int             // more calls, dropped after 200 ms
		rate      float64         // successes per ms of the round trip that started it; 0 unknown
		cv        float64         // the spread before the probe, if not the quiet default
		nb        float64         // calls behind b, if not 100
		wantB     time.Duration
		wantLimit float64
		wantPhase phase
		wantDepth int // the next probe's limit, when probing
	}{
		{name: "agrees: averaged, two probes' worth of the old",
			depth: 18, mean: 10500 * time.Microsecond, wantB: (10*32 + 10.5*16) * ms / 48, wantLimit: 40, wantPhase: steady},
		// The downstream slowed: averaged with the old b, b would still
		// be late, and every round trip would cut the limit.
		{name: "later than b by more than t: replaced",
			depth: 18, mean: 20 * ms, wantB: 20 * ms, wantLimit: 40, wantPhase: steady},
		{name: "agrees with the start's b: replaced, not averaged; again at half",
			start: true, depth: 18, mean: 10500 * time.Microsecond, wantB: 10500 * time.Microsecond, wantLimit: 40, wantPhase: probing, wantDepth: 9},
		// t = 0.3. Higher than b by more than a standard error (t/3), at
		// 1.5 calls per ms where the round trip before carried 4: no
		// queue carried the probe's calls, and the start's were fast ones.
		{name: "higher than the start's b, below the throughput: confirmed",
			start: true, depth: 18, mean: 12 * ms, rate: 4, wantB: 12 * ms, wantLimit: 40, wantPhase: steady},
		{name: "higher than the start's b by more than t, below the throughput: confirmed",
			start: true, depth: 18, mean: 14 * ms, rate: 4, wantB: 14 * ms, wantLimit: 40, wantPhase: steady},
		// At the round trip's throughput the probe may have met a queue
		// deeper than the start's, which was still growing: a start's b
		// of 108 ms (S = 20 ms) and a probe at 124 that read 153 ms held
		// a limit of 249 for good over real gRPC.
		{name: "higher than the start's b, at the throughput: again at half",
			start: true, depth: 18, mean: 12 * ms, rate: 1.7, wantB: 12 * ms, wantLimit: 40, wantPhase: probing, wantDepth: 9},
		{name: "higher than the start's b by more than t, at the throughput: again at half",
			start: true, depth: 18, mean: 14 * ms, rate: 1.4, wantB: 14 * ms, wantLimit: 40, wantPhase: probing, wantDepth: 9},
		{name: "higher than the start's b, throughput unknown: again at half",
			start: true, depth: 18, mean: 14 * ms, wantB: 14 * ms, wantLimit: 40, wantPhase: probing, wantDepth: 9},
		// Noisy RTTs (cv 1.34 once the probe is counted) and a start's b
		// on 16 calls: t = 1.42, but the throughputs compared rest on the
		// probe's 16 calls and the round trip's 256, whose tolerance is
		// 1.04. 2 calls per ms carried 32 at the probe's mean; its 18 are
		// below that by two standard errors of the two (30.5), not by
		// two of b's (35.1).
		{name: "noisy, higher than the start's b, below the throughput: confirmed",
			start: true, depth: 18, mean: 16 * ms, rate: 2, cv: 1.5, nb: 16, wantB: 16 * ms, wantLimit: 40, wantPhase: steady},
		// 18 calls at 10.5 ms are 1.7 a ms, below the 4 the round trip
		// carried: no queue held the probe's calls, so none held b's.
		{name: "agrees with the start's b, below the throughput: confirmed",
			start: true, depth: 18, mean: 10500 * time.Microsecond, rate: 4, wantB: 10500 * time.Microsecond, wantLimit: 40, wantPhase: steady},
		// Noisy RTTs (cv 1.42 once the probe is counted): a probe at 9
		// would time 72 calls, whose t against this probe's 16 is 1.17,
		// so a mean halved by a queue would agree too: it tells nothing.
		{name: "noisy, agrees with the start's b: no probe at half could tell; confirmed",
			start: true, depth: 18, mean: 10500 * time.Microsecond, cv: 1.5, nb: 16, wantB: 10500 * time.Microsecond, wantLimit: 40, wantPhase: steady},
		// A quiet moving spread (cv 0.49 once the probe is counted), but
		// the probe's own calls, 14 at 5 ms and 2 at 50 ms, have cv 1.45:
		// a probe at 9 would time 25 calls, whose t against these 16 is
		// 1.39 at the probe's spread. The moving spread of a heavy tail
		// reads low (a lognormal σ = 1.2 one read 0.88 for 1.79).
		{name: "agrees with the start's b, its own calls noisy: no probe at half could tell; confirmed",
			start: true, depth: 18, rtts: slices.Concat(slices.Repeat([]time.Duration{5 * ms}, 14), []time.Duration{50 * ms, 50 * ms}),
			wantB: 10625 * time.Microsecond, wantLimit: 40, wantPhase: steady},
		{name: "fell in proportion to the depth: again at half",
			depth: 10, mean: 5 * ms, wantB: 5 * ms, wantLimit: 13, wantPhase: probing, wantDepth: 5},
		{name: "fell in proportion to the depth, below the throughput: confirmed",
			depth: 10, mean: 5 * ms, rate: 4, wantB: 5 * ms, wantLimit: 13, wantPhase: steady},
		{name: "fell, less than the depth: the queue is gone",
			depth: 10, mean: 7 * ms, wantB: 7 * ms, wantLimit: 13, wantPhase: steady},
		{name: "the start's b fell: again at half",
			start: true, depth: 18, mean: 5 * ms, wantB: 5 * ms, wantLimit: 1.3 * 18, wantPhase: probing, wantDepth: 9},
		// The overrun widens the spread: t = 1.186, and the limit is cut
		// to (1+t)·10.
		{name: "fell, but its calls overran: b stays, again at half",
			depth: 10, mean: 2 * ms, overruns: 1, wantB: 10 * ms, wantLimit: 21.858228318736444, wantPhase: probing, wantDepth: 5},
		{name: "all dropped: again at half",
			depth: 18, wantB: 10 * ms, wantLimit: 40, wantPhase: probing, wantDepth: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.bDepth = 20
			if tt.start {
				l.bDepth, l.unconfirmed = 0, true
			}
			l.phase, l.probeLimit = collecting, tt.depth
			l.rate, l.rateN = tt.rate/float64(ms), 256
			if tt.cv != 0 {
				l.cv, l.spreadVar = tt.cv, math.Pow(tt.cv*l.spreadMean, 2)
			}
			if tt.nb != 0 {
				l.nb = tt.nb
			}
			probeAdd := func(s Sample) { l.probe.add(s); l.probeRTTs = append(l.probeRTTs, s.RTT) }
			for _, rtt := range tt.rtts {
				probeAdd(Sample{RTT: rtt, Outcome: Success})
			}
			if tt.mean > 0 {
				for range 16 {
					probeAdd(Sample{RTT: tt.mean, Outcome: Success})
				}
			}
			for range tt.overruns {
				probeAdd(Sample{RTT: 200 * ms, Outcome: Dropped})
			}
			l.mu.Lock()
			l.endProbeLocked(at)
			l.mu.Unlock()
			assert.InDelta(t, float64(tt.wantB), float64(l.b), float64(time.Microsecond), "b")
			assert.InDelta(t, tt.wantLimit, l.limit, 1e-6, "limit")
			assert.Equal(t, tt.wantPhase, l.phase)
			if tt.wantPhase == probing {
				assert.Equal(t, tt.wantDepth, l.probeLimit, "the next probe's limit")
			} else {
				// A limit the probe capped has not halved since.
				assert.InDelta(t, tt.wantLimit, l.probedAt, 1e-6, "the limit halving counts from")
			}
		})
	}
}

// TestLittleProbeCountsSlowCalls: a probe ends when every call granted
// during its admission has returned, so the rare slow calls of a
// cache-like service count in b. Averaged over its first returns, it read
// the fast calls only (a third of the mean), and every round trip after
// was late. A call granted after the admission, before any call returned
// to end it, is not the probe's: it may have met the queue the probe's
// calls made.
func TestLittleProbeCountsSlowCalls(t *testing.T) {
	ms := time.Millisecond
	l, at := steadyLittle(t, 40)
	l.bAt = t0.Add(-time.Minute)
	feed(l, roundTrip(at, 10*ms, 10, 40, Success))
	require.Equal(t, probing, l.phase)
	from := l.probeFrom
	// 16 calls granted: 14 fast, 2 ten times slower; then one more.
	n := l.probeCalls(l.probeLimit)
	require.Equal(t, 16, n)
	for range n {
		joined, _ := l.granted(5)
		require.True(t, joined, "a grant within the quota joins the cohort")
	}
	joined, _ := l.granted(5)
	require.False(t, joined, "a grant past the quota does not")
	feed(l, cohort(roundTrip(from, 5*ms, 14, 5, Success)))
	require.Equal(t, collecting, l.phase, "admission over")
	assert.Equal(t, 16, l.grants)
	feed(l, roundTrip(from, 500*ms, 1, 5, Success))
	require.Equal(t, collecting, l.phase, "the call granted after is not the probe's")
	feed(l, cohort(roundTrip(from, 50*ms, 1, 5, Success)))
	require.Equal(t, collecting, l.phase, "one slow call still out")
	feed(l, cohort(roundTrip(from, 50*ms, 1, 5, Success)))
	require.Equal(t, steady, l.phase)
	// The probe's mean, (14·5 + 2·50) / 16 = 10.625 ms, weighed with the
	// old b at two probes' worth, of the size the probe's spread now asks.
	w := float64(2 * l.probeCalls(l.probeLimit))
	want := (10*w + 10.625*float64(n)) / (w + float64(n))
	assert.InDelta(t, want, float64(l.b)/float64(ms), 1e-6)
}

// TestLittleSlowStart: in the start, a success grows the limit by one when
// its grant found the limit at least half full, counted against the limit
// of that moment. Counted against the limit at its return, a limit that grew in
// the meantime no longer counted its own calls, and it grew about 1.1×
// per round trip: at C = 64, S = 100 ms and half load, 2.9 % of a fresh
// process's calls were refused in its first 3 s.
func TestLittleSlowStart(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		counted   bool          // a Limiter counts the grants
		grantedIn int           // calls in flight at the grant, the limit then 20
		rtt       time.Duration // the start's calls back so far average 10 ms
		want      float64
	}{
		{"found the limit full, on time: one more", true, 20, 12 * ms, 26},
		{"found the limit half full, on time: one more", true, 10, 12 * ms, 26},
		{"found the limit full, met a queue: stays", true, 20, 14 * ms, 25},
		{"found it under half full: stays", true, 9, 10 * ms, 25},
		{"without a Limiter, in flight against the limit now: stays", false, 12, 10 * ms, 25},
		{"without a Limiter, the limit now half full: one more", false, 13, 10 * ms, 26},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLittle(AIMDConfig{}, true)
			var full bool
			if tt.counted {
				l.granted(1) // the first call, admitted while the start admits all
			}
			first := Sample{RTT: 10 * ms, Inflight: 1, Outcome: Success, At: t0.Add(10 * ms), cohort: tt.counted}
			l.Update(first)
			require.Equal(t, probing, l.phase)
			require.InDelta(t, 20, l.limit, 1e-9, "the first return: the initial limit")
			if tt.counted {
				_, full = l.granted(tt.grantedIn)
			}
			l.limit = 25 // grown since
			l.Update(Sample{RTT: tt.rtt, Inflight: tt.grantedIn, Outcome: Success, At: t0.Add(40 * ms), full: full})
			assert.InDelta(t, tt.want, l.limit, 1e-9)
		})
	}
}

// cohort marks samples as the calls of a probe's cohort.
func cohort(samples []Sample) []Sample {
	for i := range samples {
		samples[i].cohort = true
	}
	return samples
}

// TestLittleSpread: the spread is averaged over round trips' variances,
// so round trips of ten calls of which only one in ten holds a slow call
// still read the calls' coefficient of variation.
func TestLittleSpread(t *testing.T) {
	ms := time.Millisecond
	l, at := steadyLittle(t, 40)
	l.cv = -1
	for i := range 400 {
		trip := roundTrip(at, 5*ms, 10, 5, Success)
		if i%10 == 0 {
			trip[0].RTT, trip[0].At = 105*ms, at.Add(105*ms)
		}
		feed(l, trip)
		at = at.Add(110 * ms)
	}
	// Calls: 1 % at 105 ms, the rest at 5 ms: mean 6 ms, sd 9.95 ms, a
	// cv of 1.66. An average of the round trips' own coefficients reads
	// below 0.5: nine in ten of the first round trips hold no slow call.
	assert.Greater(t, l.cv, 1.2)
	assert.Less(t, l.cv, 2.5)
	assert.Equal(t, maxWindowSamples, l.need)
}

// TestStartWithoutSuccess: a fresh limiter whose first calls all come
// back without a success (a server ignores deadline overruns until it has
// seen a call succeed) halves the start's limit with every probe, instead
// of holding it for good. Over real gRPC with processor sharing at 5×,
// no call could succeed at the start's 390 in flight, and the limit held
// there, every call timing out, in 2 of 3 runs.
func TestStartWithoutSuccess(t *testing.T) {
	l, err := New()
	require.NoError(t, err)
	var toks []Token
	for range 400 {
		tok, ok := l.TryAcquire()
		require.True(t, ok, "the start admits every call until the first returns")
		toks = append(toks, tok)
	}
	for i := range toks {
		toks[i].Release(Ignored)
	}
	assert.LessOrEqual(t, l.Limit(), 200, "the start's limit halves when its probe has no success")
	for round := range 3 {
		before := l.Limit()
		toks = toks[:0]
		for {
			tok, ok := l.TryAcquire()
			if !ok {
				break
			}
			toks = append(toks, tok)
		}
		for i := range toks {
			toks[i].Release(Ignored)
		}
		assert.LessOrEqual(t, l.Limit(), max(before/2, 1), "round %d", round)
	}
}

// TestLittleAllIgnored: a round trip of calls that all came back Ignored
// (deadline overruns a server does not count) tells nothing about b, and
// if b holds a queue no call may succeed again: it probes at half the
// limit, and the limit itself does not move. Mixed with calls that count,
// Ignored calls change nothing.
func TestLittleAllIgnored(t *testing.T) {
	l, at := steadyLittle(t, 40)
	feed(l, roundTrip(at, 200*time.Millisecond, 10, 40, Ignored))
	assert.Equal(t, probing, l.phase)
	assert.Equal(t, 20, l.Limit(), "the probe's limit")
	assert.Equal(t, 40.0, l.limit, "the limit itself")

	l, at = steadyLittle(t, 40)
	trip := roundTrip(at, 10*time.Millisecond, 10, 40, Success)
	trip = append(trip, roundTrip(at, 200*time.Millisecond, 10, 40, Ignored)...)
	feed(l, trip)
	assert.Equal(t, steady, l.phase)
	assert.Equal(t, 52.0, l.limit, "the full, on-time round trip's step, as without the Ignored calls")
}

// TestLittleMostlyIgnored: after a start whose b holds a queue, calls may
// all overrun deadlines a server does not count, but for the few admitted
// before the queue grew: a round trip then waited seconds for enough calls
// that count (processor sharing at 2.9× from the first call, C = 16,
// S = 20 ms: 91 counted among 7,226 Ignored in 9 s, the limit at 10 C).
// While b is unconfirmed, a round trip mostly of Ignored calls probes at
// half the limit; once b is confirmed, only one of Ignored calls alone.
func TestLittleMostlyIgnored(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		name        string
		unconfirmed bool
		want        phase
	}{
		{"b unconfirmed: probe", true, probing},
		{"b confirmed: wait for calls that count", false, steady},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, at := steadyLittle(t, 40)
			l.unconfirmed = tt.unconfirmed
			trip := roundTrip(at, 50*ms, 3, 40, Success)
			trip = append(trip, roundTrip(at, 200*ms, 10, 40, Ignored)...)
			feed(l, trip)
			assert.Equal(t, tt.want, l.phase)
			assert.Equal(t, 40.0, l.limit, "the limit itself")
			if tt.want == probing {
				assert.Equal(t, 20, l.Limit(), "the probe's limit")
			}
		})
	}
}

// TestLittleDropsBelowTheLimit: a round trip below the limit in which
// every call was dropped (a downstream refusing everything at once, seen
// from a client) has no time per success: r is infinite. Averaged into an
// unconfirmed b it made b a negative duration, and every rule after
// worked from that.
func TestLittleDropsBelowTheLimit(t *testing.T) {
	l, at := steadyLittle(t, 40)
	l.unconfirmed, l.nb = true, 10
	feed(l, roundTrip(at, 30*time.Millisecond, 10, 20, Dropped))
	assert.Equal(t, 10*time.Millisecond, l.b, "b without a success to measure it")
	assert.InDelta(t, 40, l.limit, 1e-6, "a round trip below the limit does not cut it")
}
