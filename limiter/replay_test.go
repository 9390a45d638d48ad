package limiter

import (
	"bufio"
	"container/heap"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateReplay = flag.Bool("update", false, "TestReplay: rewrite testdata/replay.golden with today's limits")

const replayGolden = "testdata/replay.golden"

// TestReplay pins the default rule's limits on fixed sequences of samples.
// A refactor of little.go or window.go leaves every line of
// testdata/replay.golden as it is; a change of the rule regenerates the
// file (go test ./limiter -run TestReplay -update) and says so in its
// commit. Each line is one run of a FIFO downstream simulated event by
// event in one goroutine, so the order of samples is fixed, and hashes
// every limit Update returned and the state the run ended in.
func TestReplay(t *testing.T) {
	if raceEnabled {
		t.Skip("make test runs it without -race: one goroutine has no races to find")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the golden limits are amd64's: other architectures fuse multiply-adds")
	}
	var got []string
	for _, c := range []int{4, 16, 64} {
		for _, shape := range []string{"constant", "uniform", "cache-like"} {
			for _, load := range []float64{0.5, 1, 2, 5} {
				for _, initial := range []int{0, 20} {
					got = append(got, replay(c, shape, load, initial))
				}
			}
		}
	}
	if *updateReplay {
		require.NoError(t, os.WriteFile(replayGolden, []byte(strings.Join(got, "\n")+"\n"), 0o644))
		return
	}
	f, err := os.Open(replayGolden)
	require.NoError(t, err)
	defer f.Close()
	var want []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		want = append(want, sc.Text())
	}
	require.Len(t, want, len(got), "runs in %s", replayGolden)
	for i := range got {
		assert.Equal(t, want[i], got[i], "the limits changed; if the rule did, run go test ./limiter -run TestReplay -update")
	}
}

// replayCall is a call in the simulated downstream.
type replayCall struct {
	start, end   int64 // ns
	inflight     int
	cohort, full bool
}

type replayQueue []replayCall

func (q replayQueue) Len() int           { return len(q) }
func (q replayQueue) Less(i, j int) bool { return q[i].end < q[j].end }
func (q replayQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *replayQueue) Push(x any)        { *q = append(*q, x.(replayCall)) }
func (q *replayQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// replay runs 60,000 arrivals at load × C/S into c FIFO workers with mean
// service time S = 20 ms, behind the default rule started at initial
// (0: admit all). A call past 10·S is dropped, 2 % of the rest are Ignored
// and 1 % are untimed, as a stream's would be. Gaps and service times are
// drawn with arithmetic alone, so that no math library's last bit moves
// the golden limits.
func replay(c int, shape string, load float64, initial int) string {
	const s, arrivals = int64(20 * time.Millisecond), 60000
	r := rand.New(rand.NewPCG(uint64(c), uint64(10*load)))
	uniform := func() float64 { return (float64(r.Uint64()>>11) + 0.5) / (1 << 53) }
	service := func() int64 {
		switch shape {
		case "uniform":
			return int64(2 * uniform() * float64(s))
		case "cache-like":
			if uniform() < 0.9 {
				return s / 3
			}
			return 7 * s
		}
		return s
	}
	l := newLittle(AIMDConfig{InitialLimit: initial}, initial == 0)
	epoch := time.Unix(0, 0)
	var calls replayQueue
	free := make([]int64, c) // when each worker is next free
	inflight, next := 0, int64(0)
	gap := float64(s) / float64(c) / load
	h := fnv.New64a()
	for i := 0; i < arrivals; {
		if len(calls) > 0 && calls[0].end <= next {
			call := heap.Pop(&calls).(replayCall)
			inflight--
			smp := Sample{RTT: time.Duration(call.end - call.start), Inflight: call.inflight,
				At: epoch.Add(time.Duration(call.end)), cohort: call.cohort, full: call.full, Outcome: Success}
			switch u := uniform(); {
			case smp.RTT > time.Duration(10*s):
				smp.Outcome = Dropped
			case u < 0.02:
				smp.Outcome = Ignored
			}
			if uniform() < 0.01 {
				smp.RTT = UntimedRTT
			}
			fmt.Fprintf(h, "%d ", l.Update(smp))
			continue
		}
		now := next
		next += int64(2*uniform()*gap) + 1
		i++
		if inflight >= l.Limit() {
			continue
		}
		inflight++
		cohort, full := l.granted(inflight)
		w := 0
		for j := range free {
			if free[j] < free[w] {
				w = j
			}
		}
		free[w] = max(now, free[w]) + service()
		heap.Push(&calls, replayCall{start: now, end: free[w], inflight: inflight, cohort: cohort, full: full})
	}
	return fmt.Sprintf("C=%d %s %gx initial=%d: limits %x, ends at limit %d, b %v on %.0f calls, %d probes",
		c, shape, load, initial, h.Sum64(), l.Limit(), l.b, l.nb, l.probes)
}
