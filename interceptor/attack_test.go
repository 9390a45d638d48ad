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

// TestCallerTableFlood is the attack on the caller table: a client fills
// it with made-up keys, each still counted; a legitimate caller seen for
// the first time must be admitted all the same.
func TestCallerTableFlood(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{
		server: []Option{
			WithCallerRateLimit(MetadataKey("x-api-key"), RateLimit{PerSecond: 0.001, Burst: 1}),
			WithMaxCallers(64),
		},
		noClient: true,
	})
	call := func(key string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		_, err := e.client.Unary(ctx, &testpb.UnaryRequest{})
		return err
	}
	for i := range 500 {
		require.NoError(t, call("attacker-"+strconv.Itoa(i)))
		e.awaitRelease(t, "server")
	}
	err := call("legit")
	require.Equal(t, codes.OK, status.Code(err), "a new caller refused: %v", err)
}
