package main

import "time"

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
