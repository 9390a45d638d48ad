package interceptor

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// The trailer is gRFC A6's: a signed 32-bit count of milliseconds, a
// negative one meaning "do not retry".
func TestFormatPushback(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{250 * time.Millisecond, "250"},
		{1500 * time.Microsecond, "1"},
		{math.MaxInt32 * time.Millisecond, "2147483647"},
		{(math.MaxInt32 + 1) * time.Millisecond, "2147483647"},
		{math.MaxInt64, "2147483647"},
		{DoNotRetry, "-1"},
		{-time.Hour, "-1"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, formatPushback(tt.d), "%v", tt.d)
	}
}

func TestParsePushback(t *testing.T) {
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"250", 250 * time.Millisecond, true},
		{"2147483647", math.MaxInt32 * time.Millisecond, true},
		{"2147483648", 0, false},
		{"9223372036854", 0, false},
		{"-1", DoNotRetry, true},
		{"-40", DoNotRetry, true},
		{"-2147483648", DoNotRetry, true},
		{"-2147483649", 0, false},
		{"1.5", 0, false},
		{"10ms", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		d, ok := parsePushback(tt.v)
		assert.Equal(t, tt.ok, ok, "%q", tt.v)
		assert.Equal(t, tt.want, d, "%q", tt.v)
	}
}

// What a server's PushbackFunc says reaches the client as gRFC A6 has it:
// a delay, -1 for "do not retry", or no trailer at all (ordinary backoff).
func TestServerPushbackTrailer(t *testing.T) {
	tests := []struct {
		name     string
		pushback time.Duration
		want     []string
	}{
		{"a delay", 250 * time.Millisecond, []string{"250"}},
		{"clamped to int32 milliseconds", 100 * 24 * time.Hour, []string{"2147483647"}},
		{"do not retry", DoNotRetry, []string{"-1"}},
		{"any negative is do not retry", -time.Second, []string{"-1"}},
		{"no trailer: ordinary backoff", NoPushback, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBlock()
			svc := &testpb.Service{ServerStreamFunc: func(_ *testpb.ServerStreamRequest, s grpc.ServerStreamingServer[testpb.ServerStreamResponse]) error {
				return b.wait(s.Context())
			}}
			e := newEnv(t, svc, envConfig{
				server:   []ServerOption{WithMethod(testService, fixed(1)), WithPushback(func(LimiterState) time.Duration { return tt.pushback })},
				noClient: true,
			})
			first, err := e.client.ServerStream(t.Context(), &testpb.ServerStreamRequest{})
			require.NoError(t, err)
			b.awaitEntered(t, 1)

			var trailer metadata.MD
			_, err = e.client.Unary(t.Context(), &testpb.UnaryRequest{}, grpc.Trailer(&trailer))
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Equal(t, tt.want, trailer.Get(pushbackKey))

			close(b.release)
			_, _ = first.Recv()
			e.awaitRelease(t, "server")
		})
	}
}
