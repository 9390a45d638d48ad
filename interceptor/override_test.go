package interceptor

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
)

// fakeTimers replaces a core's timers: expiries run when the test says.
type fakeTimers struct {
	mu      sync.Mutex
	pending []*fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (ft *fakeTimers) timer(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	t := &fakeTimer{d: d, f: f}
	ft.pending = append(ft.pending, t)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fire runs every timer not stopped.
func (ft *fakeTimers) fire() {
	ft.mu.Lock()
	pending := ft.pending
	ft.pending = nil
	ft.mu.Unlock()
	for _, t := range pending {
		if !t.stopped {
			t.f()
		}
	}
}

func TestOverride(t *testing.T) {
	s, err := NewServer(WithDefault(perCall()))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	timers := &fakeTimers{}
	hook(t, s.core, func(h *testhook.Hooks) { h.AfterFunc = timers.timer })
	g := gateOf(s.core, unaryMethod)
	name := "sluice.test.v1.TestService/Unary"

	require.NoError(t, s.SetOverride(name, 3, time.Minute))
	assert.Equal(t, 3, g.lim.Limit())
	assert.WithinDuration(t, time.Now().Add(time.Minute), s.Limiters()[0].OverrideUntil, 5*time.Second)
	assert.Equal(t, time.Minute, timers.pending[0].d)

	// A new override replaces the first; the first's expiry does nothing.
	require.NoError(t, s.SetOverride(name, 0, time.Hour))
	assert.Equal(t, 0, g.lim.Limit(), "0 rejects everything")
	_, rej := s.admit(t.Context(), s.tab.Load().lookup(unaryMethod))
	assert.NotNil(t, rej)

	timers.fire()
	assert.Equal(t, 10, g.lim.Limit(), "after the ttl the algorithm's limit is back")
	assert.True(t, s.Limiters()[0].OverrideUntil.IsZero())

	require.NoError(t, s.SetOverride(name, 4, time.Minute))
	require.NoError(t, s.ClearOverride(name))
	assert.Equal(t, 10, g.lim.Limit())
	timers.fire() // the cleared override's expiry is stopped
	assert.Equal(t, 10, g.lim.Limit())
	require.NoError(t, s.ClearOverride(name), "clearing twice is fine")
}

func TestOverrideErrors(t *testing.T) {
	s, err := NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	gateOf(s.core, unaryMethod)
	name := "sluice.test.v1.TestService/Unary"
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"unknown limiter", s.SetOverride("nope", 1, time.Minute), `interceptor: no limiter of that name: "nope"`},
		{"unknown limiter to clear", s.ClearOverride("nope"), `interceptor: no limiter of that name: "nope"`},
		{"zero ttl", s.SetOverride(name, 1, 0), "interceptor: override ttl is 0s, must be in (0, 24h0m0s]"},
		{"ttl too long", s.SetOverride(name, 1, 25*time.Hour), "interceptor: override ttl is 25h0m0s, must be in (0, 24h0m0s]"},
		{"negative limit", s.SetOverride(name, -1, time.Minute),
			`interceptor: override of "sluice.test.v1.TestService/Unary": limiter: pinned limit is -1, must be in [0, 1048576]`},
	}
	for _, tt := range tests {
		assert.EqualError(t, tt.err, tt.want, tt.name)
	}
	assert.True(t, errors.Is(s.ClearOverride("nope"), ErrUnknownLimiter))
}
