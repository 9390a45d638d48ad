package interceptor

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testpb"
)

// TestMetadataKeyAppendedByProxy is the attack on MetadataKey behind an
// authenticating proxy that appends the tenant it verified to whatever
// the client sent: the client writes a fresh value of its own first, on
// every call, hoping to be keyed by it. Only the proxy's value, the last,
// may name the caller, so a quota of one lets one call through.
func TestMetadataKeyAppendedByProxy(t *testing.T) {
	tests := []struct {
		name string
		md   func(i int) []string // the header as it reaches the server
	}{
		{"two values", func(i int) []string {
			return []string{"x-tenant", "fresh-" + strconv.Itoa(i), "x-tenant", "alice"}
		}},
		{"one comma-separated value", func(i int) []string {
			return []string{"x-tenant", "fresh-" + strconv.Itoa(i) + ", alice"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, &testpb.Service{}, envConfig{
				server:   []Option{WithCallerRateLimit(MetadataKey("x-tenant"), RateLimit{PerSecond: 0.001, Burst: 1})},
				noClient: true,
			})
			passed := 0
			for i := range 100 {
				ctx := metadata.AppendToOutgoingContext(t.Context(), tt.md(i)...)
				_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
				switch status.Code(err) {
				case codes.OK:
					passed++
					e.awaitRelease(t, "server")
				case codes.ResourceExhausted:
					e.awaitRejection(t, "server:caller_rate")
				default:
					require.NoError(t, err)
				}
			}
			require.Equal(t, 1, passed, "calls through a quota of 1")
		})
	}
}
