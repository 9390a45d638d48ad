package interceptor

import (
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/callerkey"
	"github.com/sluice-go/sluice/internal/testbed/testpb"
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
				server:   []ServerOption{callerRateLimit(callerkey.Metadata("x-tenant"), RateLimit{PerSecond: 0.001, Burst: 1}, 0)},
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

// Attack on the retry-after of a very slow rate: the wait of a rate below
// about 1e-10/s does not fit a time.Duration, and rounding it up to whole
// milliseconds wrapped it negative: the trailer said "-1", do not retry,
// which a client's retry policy obeys for good. The wait must be sent as
// the longest the trailer carries.
func TestSlowRateRetryAfter(t *testing.T) {
	for _, rate := range []float64{1e-10, 1e-11, 1e-300} {
		t.Run(strconv.FormatFloat(rate, 'g', -1, 64), func(t *testing.T) {
			e := newEnv(t, &testpb.Service{}, envConfig{
				server:   []ServerOption{WithMethod(unaryMethod, Limit{Rate: RateLimit{PerSecond: rate, Burst: 1}})},
				noClient: true,
			})
			_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
			require.NoError(t, err)
			e.awaitRelease(t, "server")
			var trailer metadata.MD
			_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&trailer))
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			e.awaitRejection(t, "server:rate")
			assert.Equal(t, []string{"2147483647"}, trailer.Get(pushbackKey), "the longest wait the trailer carries")
			var info *errdetails.RetryInfo
			for _, d := range status.Convert(err).Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					info = ri
				}
			}
			require.NotNil(t, info)
			assert.Equal(t, 2147483647*time.Millisecond, info.GetRetryDelay().AsDuration())
		})
	}
}

// The holder of an IPv6 /48, a site's usual allocation, sends each call
// from another of its 65,536 /64s, through a trusted proxy. Keyed by /64,
// the default, every call is a new caller; IPv6Prefix 48 gives the whole
// site one quota.
func TestIPv6PrefixQuota(t *testing.T) {
	tests := []struct {
		prefix int
		want   int // calls through a quota of 1
	}{
		{0, 100}, // /64: one quota per call
		{56, 1},
		{48, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("prefix %d", tt.prefix), func(t *testing.T) {
			key, err := callerkey.IP{IPv6Prefix: tt.prefix, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}.Func()
			require.NoError(t, err)
			e := newEnv(t, &testpb.Service{}, envConfig{
				server:   []ServerOption{callerRateLimit(key, RateLimit{PerSecond: 0.001, Burst: 1}, 0)},
				noClient: true,
			})
			passed := 0
			for i := range 100 {
				ctx := metadata.AppendToOutgoingContext(t.Context(), "x-forwarded-for", fmt.Sprintf("2001:db8:7:%x::1", i))
				_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
				if status.Code(err) == codes.OK {
					passed++
					e.awaitRelease(t, "server")
				} else {
					e.awaitRejection(t, "server:caller_rate")
				}
			}
			assert.Equal(t, tt.want, passed, "calls through a quota of 1")
		})
	}
}
