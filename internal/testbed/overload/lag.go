package overload

import (
	"os"
	"strings"
	"sync"
	"time"
)

// LagProbe is how often a LagMonitor wakes up: the resolution of its lag.
const LagProbe = 10 * time.Millisecond

// A LagMonitor measures how late the process's timers fire, second by
// second. On a machine busy with other work a run falls behind by itself:
// arrivals leave late and service times stretch, and what is measured then
// is the machine, not the protection. Reports say when that happened.
type LagMonitor struct {
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	worst []time.Duration // worst lag in each second since start
}

// StartLagMonitor starts measuring; second 0 begins at start.
func StartLagMonitor(start time.Time) *LagMonitor {
	m := &LagMonitor{start: start, stop: make(chan struct{})}
	m.wg.Go(func() {
		t := time.NewTimer(LagProbe)
		defer t.Stop()
		for {
			t0 := time.Now()
			t.Reset(LagProbe)
			select {
			case <-m.stop:
				return
			case now := <-t.C:
				m.record(now, now.Sub(t0)-LagProbe)
			}
		}
	})
	return m
}

func (m *LagMonitor) record(now time.Time, lag time.Duration) {
	sec := int(now.Sub(m.start) / time.Second)
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.worst) <= sec {
		m.worst = append(m.worst, 0)
	}
	m.worst[sec] = max(m.worst[sec], lag)
}

// SoFar returns the worst lag of each second measured so far.
func (m *LagMonitor) SoFar() []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Duration(nil), m.worst...)
}

// Stop ends the monitor and returns the worst lag of each second.
func (m *LagMonitor) Stop() []time.Duration {
	close(m.stop)
	m.wg.Wait()
	return m.SoFar()
}

// LoadAverage returns the machine's 1-minute load average, or "?" where
// /proc/loadavg does not exist: a run on a busy machine measures the
// machine as much as the protection.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
