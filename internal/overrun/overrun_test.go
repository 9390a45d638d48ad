package overrun

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestBaseline(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		observed  []time.Duration
		held      time.Duration
		wantValue time.Duration
		wantFault bool // the caller's
		wantOwn   bool // the server's
	}{
		{"nothing seen: not the caller's, and no baseline to call it the server's", nil, ms, 0, false, false},
		{"the first success is the average", []time.Duration{80 * ms}, 160 * ms, 80 * ms, true, false},
		{"past twice the average: the server's", []time.Duration{80 * ms}, 161 * ms, 80 * ms, false, true},
		{"a new RTT weighs an eighth", []time.Duration{80 * ms, 160 * ms}, 180 * ms, 90 * ms, true, false},
		{"held longer than twice that", []time.Duration{80 * ms, 160 * ms}, 181 * ms, 90 * ms, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Baseline
			for _, rtt := range tt.observed {
				b.Observe(rtt)
			}
			assert.Equal(t, tt.wantValue, b.Value())
			assert.Equal(t, tt.wantFault, b.CallersFault(tt.held))
			assert.Equal(t, tt.wantOwn, b.ServersFault(tt.held))
		})
	}
}
