package admin

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/interceptor"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

// Attack: a caller on a loopback address with no credentials at all (in a
// service mesh, anyone whose traffic the sidecar forwards from 127.0.0.6)
// lists limiters, pins a limit to 0 and clears overrides.
func TestAttackLoopbackWithoutCredentials(t *testing.T) {
	limits, err := interceptor.NewServer()
	require.NoError(t, err)
	defer func() { assert.NoError(t, limits.Close()) }()
	rec := &recorder{}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	defer slog.SetDefault(old)
	svc, err := newService(limits)
	assert.EqualError(t, err, errNoAuthorizer, "no service without an authorizer")
	if err != nil {
		svc = &service{} // a service without authorizers refuses every call all the same
	}
	gs := grpc.NewServer()
	sluicev1.RegisterLimitsServiceServer(gs, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	defer func() { gs.Stop(); wg.Wait() }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { assert.NoError(t, conn.Close()) }()
	c := sluicev1.NewLimitsServiceClient(conn)

	_, err = c.ListLimits(t.Context(), &sluicev1.ListLimitsRequest{})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "list: %v", err)
	_, err = c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: "x", Limit: 0, Ttl: durationpb.New(24 * time.Hour)})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "override: %v", err)
	_, err = c.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: "x"})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "clear: %v", err)
	watch, err := c.WatchLimits(t.Context(), &sluicev1.WatchLimitsRequest{})
	require.NoError(t, err)
	_, err = watch.Recv()
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "watch: %v", err)
	assert.Equal(t, errNoAuthorizer, status.Convert(err).Message(), "the refusal says how to open the service")
	assert.Len(t, rec.audit(), 4, "every refusal is logged")
}

// Attack: a caller with no right to the service floods it with refused
// calls, each naming a limiter of a quarter megabyte: every refusal was
// logged with the whole name, at the caller's pace. The log must stay
// small: names cut, refusals throttled, the ones left out counted.
func TestAttackRefusalLogFlood(t *testing.T) {
	rec := &recorder{}
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	refuse := func(context.Context, string) (string, error) {
		return "", status.Error(codes.PermissionDenied, "not an operator")
	}
	c := start(t, WithAuthorizer(refuse), WithLogger(slog.New(rec)), withClock(clock))
	name := strings.Repeat("a", 256<<10)
	const calls = 100
	for range calls {
		_, err := c.SetOverride(t.Context(), &sluicev1.SetOverrideRequest{Name: name, Limit: 0, Ttl: durationpb.New(time.Hour)})
		require.Equal(t, codes.PermissionDenied, status.Code(err))
	}
	got := rec.audit()
	size := 0
	for _, l := range got {
		size += len(l.Attrs["limiter"])
	}
	require.Len(t, got, refusalLogBurst, "refusals logged in one interval; %d bytes of names", size)
	for _, l := range got {
		assert.Equal(t, `"`+strings.Repeat("a", maxLoggedName)+`"...`, l.Attrs["limiter"])
		assert.Equal(t, "262144", l.Attrs["limiter_bytes"])
		assert.NotContains(t, l.Attrs, "suppressed")
	}

	mu.Lock()
	now = now.Add(refusalLogInterval)
	mu.Unlock()
	_, err := c.ClearOverride(t.Context(), &sluicev1.ClearOverrideRequest{Name: "x\ny"})
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	got = rec.audit()
	require.Len(t, got, refusalLogBurst+1, "the next interval logs again")
	last := got[len(got)-1]
	assert.Equal(t, `"x\ny"`, last.Attrs["limiter"], "a name that is not plain text is quoted")
	assert.NotContains(t, last.Attrs, "limiter_bytes")
	assert.Equal(t, "90", last.Attrs["suppressed"], "and counts what it left out")
}
