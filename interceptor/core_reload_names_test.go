package interceptor

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluice-go/sluice/limiter"
)

// limiterNames lists the names Limiters gives, in order.
func limiterNames(c *core) []string {
	var names []string
	for _, l := range c.limiters() {
		names = append(names, l.Name)
	}
	return names
}

// gaugeNames lists the sluice.limiter attribute of each sluice.limit point.
func gaugeNames(t *testing.T, r *sdkmetric.ManualReader) []string {
	t.Helper()
	g, ok := collect(t, r)["sluice.limit"].(metricdata.Gauge[int64])
	require.True(t, ok)
	var names []string
	for _, dp := range g.DataPoints {
		v, _ := dp.Attributes.Value(attrLimiter)
		names = append(names, v.AsString())
	}
	sort.Strings(names)
	return names
}

// Attack: after a Reload moved a method off the default limiter, the dead
// limiter stayed listed first under the method's name, and an operator's
// override pinned it instead of the live one.
func TestReloadLeavesOneLimiterPerName(t *testing.T) {
	const unary, bidi = "sluice.test.v1.TestService/Unary", "sluice.test.v1.TestService/Bidi"
	tests := []struct {
		name   string
		reload []ServerOption
		want   []string // Limiters' names after the reload and a call of each method
	}{
		{"method gets its own Limit", []ServerOption{WithDefault(fixed(2)), WithMethod(unaryMethod, fixed(5))}, []string{bidi, unary}},
		{"service gets a Limit", []ServerOption{WithDefault(fixed(2)), WithMethod(testService, fixed(5))}, []string{"sluice.test.v1.TestService/"}},
		{"method exempted", []ServerOption{WithDefault(fixed(2)), WithExempt(unaryMethod)}, []string{bidi}},
		{"default changed", []ServerOption{WithDefault(fixed(3))}, []string{unary, bidi}},
		{"nothing changed", []ServerOption{WithDefault(fixed(2))}, []string{unary, bidi}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			s, err := NewServer(WithDefault(fixed(2)), WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
			require.NoError(t, err)
			defer func() { assert.NoError(t, s.Close()) }()
			old := s.tab.Load().lookup(unaryMethod)
			s.tab.Load().lookup(bidiMethod)
			tok, rej := s.admit(t.Context(), old) // in flight across the reload
			require.Nil(t, rej)

			require.NoError(t, s.Reload(tt.reload...))
			live := s.tab.Load().lookup(unaryMethod)
			s.tab.Load().lookup(bidiMethod)

			assert.Equal(t, tt.want, limiterNames(s.core))
			want := append([]string(nil), tt.want...)
			sort.Strings(want)
			assert.Equal(t, want, gaugeNames(t, reader), "one sluice.limit series per limiter")

			if live.gate != nil {
				require.NoError(t, s.SetOverride(live.gate.name, 1, time.Minute))
				assert.Equal(t, 1, live.gate.lim.Limit(), "the override reaches the live limiter")
				require.NoError(t, s.ClearOverride(live.gate.name))
			}
			s.release(t.Context(), old, &tok, limiter.Ignored, true)
			assert.Zero(t, old.gate.lim.Inflight(), "the call admitted before the reload returned its permit")
		})
	}
}

// A call that read the table just before a Reload may still create a
// limiter in the old table; that limiter serves only that call and is
// not listed.
func TestReloadRetiredTableCreatesNoListedLimiter(t *testing.T) {
	s, err := NewServer(WithDefault(fixed(2)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	old := s.tab.Load()
	require.NoError(t, s.Reload(WithDefault(fixed(2)), WithMethod(unaryMethod, fixed(5))))
	r := old.lookup(unaryMethod)
	require.NotNil(t, r.gate)
	tok, rej := s.admit(t.Context(), r)
	require.Nil(t, rej)
	s.tab.Load().lookup(unaryMethod)
	assert.Equal(t, []string{"sluice.test.v1.TestService/Unary"}, limiterNames(s.core))
	assert.Equal(t, 5, s.Limiters()[0].Limit)
	s.release(t.Context(), r, &tok, limiter.Ignored, true)
}
