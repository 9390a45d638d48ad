package main

import (
	"os"
	"strings"
	"sync"
	"time"
)

// lagProbe is how often the lag monitor wakes up.
const lagProbe = 10 * time.Millisecond

// A lagMonitor measures how late the process's timers fire. On a machine
// busy with other work the demo itself falls behind: arrivals leave late
// and the backend's service times stretch, and what is measured then is
// the machine, not sluice. The report says when that happened.
type lagMonitor struct {
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup

	mu  sync.Mutex
	max []time.Duration // worst lag in each second since start
}

func startLagMonitor(start time.Time) *lagMonitor {
	m := &lagMonitor{start: start, stop: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTimer(lagProbe)
		defer t.Stop()
		for {
			t0 := time.Now()
			t.Reset(lagProbe)
			select {
			case <-m.stop:
				return
			case now := <-t.C:
				m.record(now, now.Sub(t0)-lagProbe)
			}
		}
	}()
	return m
}

func (m *lagMonitor) record(now time.Time, lag time.Duration) {
	sec := int(now.Sub(m.start) / time.Second)
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.max) <= sec {
		m.max = append(m.max, 0)
	}
	m.max[sec] = max(m.max[sec], lag)
}

// Stop ends the monitor and returns the worst lag of each second.
func (m *lagMonitor) Stop() []time.Duration {
	close(m.stop)
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max
}

// lagSummary describes the lag of a run: the worst one, when, and how
// many seconds had a lag above limit.
type lagSummary struct {
	Max      time.Duration
	At       int // second of the worst lag
	Over     int // seconds with a lag above the limit
	OverFrom int // first such second, if any
}

func summarizeLag(lags []time.Duration, limit time.Duration) lagSummary {
	var s lagSummary
	for i, l := range lags {
		if l > s.Max {
			s.Max, s.At = l, i
		}
		if l > limit {
			if s.Over == 0 {
				s.OverFrom = i
			}
			s.Over++
		}
	}
	return s
}

// loadAverage returns the machine's 1-minute load average, or "?" where
// /proc/loadavg does not exist.
func loadAverage() string {
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
