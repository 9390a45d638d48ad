package interceptor

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type callerCtxKey struct{}

// callerOf names the caller a test put in the context.
func callerOf(ctx context.Context, _ string) string {
	s, _ := ctx.Value(callerCtxKey{}).(string)
	return s
}

func TestRateLimiter(t *testing.T) {
	slow := func(burst int) RateLimit { return RateLimit{PerSecond: 0.001, Burst: burst} } // no refill within a test
	as := func(caller string) context.Context {
		return context.WithValue(t.Context(), callerCtxKey{}, caller)
	}
	tests := []struct {
		name  string
		rate  RateLimit
		opts  []RateLimiterOption
		calls []string // callers, in order
		want  []string // "" admitted, else the start of the error
	}{
		{"shared rate", slow(2), nil, []string{"a", "b", "c"},
			[]string{"", "", "sluice: rate limit"}},
		{"caller quota", RateLimit{}, []RateLimiterOption{WithCallerQuota(callerOf, slow(1))},
			[]string{"a", "a", "b"}, []string{"", "sluice: caller rate limit", ""}},
		// A caller over its quota spends none of the shared rate, and a
		// call the shared rate turns away spends none of the caller's.
		{"quota before the shared rate", slow(2), []RateLimiterOption{WithCallerQuota(callerOf, slow(1))},
			[]string{"a", "a", "a", "b", "c", "d"}, []string{"", "sluice: caller rate limit", "sluice: caller rate limit", "", "sluice: rate limit", "sluice: rate limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl, err := NewRateLimiter(tt.rate, tt.opts...)
			require.NoError(t, err)
			for i, caller := range tt.calls {
				err := rl.Limit(as(caller))
				if tt.want[i] == "" {
					assert.NoError(t, err, "call %d by %s", i, caller)
					continue
				}
				var rle *RateLimitError
				require.True(t, errors.As(err, &rle), "call %d by %s: %v", i, caller, err)
				assert.Positive(t, rle.RetryAfter)
				assert.Contains(t, err.Error(), tt.want[i], "call %d by %s", i, caller)
			}
		})
	}
}

func TestNewRateLimiterErrors(t *testing.T) {
	_, err := NewRateLimiter(RateLimit{})
	assert.ErrorContains(t, err, "no rate and no caller quota")
	_, err = NewRateLimiter(RateLimit{PerSecond: -1})
	assert.ErrorContains(t, err, "interceptor: NewRateLimiter:")
	_, err = NewRateLimiter(RateLimit{}, WithCallerQuota(nil, RateLimit{PerSecond: 1}))
	assert.ErrorContains(t, err, "the KeyFunc is nil")
}
