package interceptor

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/internal/testbed/testpb"
)

// requestAttr lists the distinct values of key on sluice.requests points.
func requestAttr(t *testing.T, r *sdkmetric.ManualReader, key attribute.Key) []string {
	t.Helper()
	sum, ok := collect(t, r)["sluice.requests"].(metricdata.Sum[int64])
	require.True(t, ok)
	seen := map[string]bool{}
	for _, dp := range sum.DataPoints {
		v, _ := dp.Attributes.Value(key)
		seen[v.AsString()] = true
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// drainUnknown is a grpc.UnknownServiceHandler that answers every call.
func drainUnknown(_ any, ss grpc.ServerStream) error {
	var req testpb.UnaryRequest
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	return ss.SendMsg(&testpb.UnaryResponse{})
}

// Attack: a caller picked the metrics' cardinality (and got a limiter per
// name) by calling made-up methods, served by an UnknownServiceHandler on
// the server, or sent through cc.Invoke on the client.
func TestUnknownMethodsAreOther(t *testing.T) {
	sreader, creader := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	e := newEnv(t, &testpb.Service{}, envConfig{
		server:     []ServerOption{WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sreader)))},
		client:     []ClientOption{WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(creader)))},
		serverOpts: []grpc.ServerOption{grpc.UnknownServiceHandler(drainUnknown)},
	})
	for i := range 20 {
		method := fmt.Sprintf("/attacker.Svc%d/Method%d", i, i)
		require.NoError(t, e.conn.Invoke(t.Context(), method, &testpb.UnaryRequest{}, &testpb.UnaryResponse{}), method)
		e.awaitRelease(t, "server")
		e.awaitRelease(t, "client")
	}
	// An unregistered method of a registered service is unknown too.
	require.NoError(t, e.conn.Invoke(t.Context(), "/sluice.test.v1.TestService/Nope", &testpb.UnaryRequest{}, &testpb.UnaryResponse{}))
	e.awaitRelease(t, "server")
	e.awaitRelease(t, "client")
	// A generated stub's call is known on both sides.
	_, err := e.client.Unary(t.Context(), &testpb.UnaryRequest{})
	require.NoError(t, err)
	e.awaitRelease(t, "server")
	e.awaitRelease(t, "client")

	const unary = "sluice.test.v1.TestService/Unary"
	for side, r := range map[string]*sdkmetric.ManualReader{"server": sreader, "client": creader} {
		assert.Equal(t, []string{otherMethod, unary}, requestAttr(t, r, semconv.RPCMethodKey), "%s rpc.method", side)
		assert.Equal(t, []string{otherMethod, unary}, requestAttr(t, r, attrLimiter), "%s sluice.limiter", side)
	}
	assert.Equal(t, []string{otherMethod, unary}, limiterNames(e.srv.core))
	assert.Equal(t, []string{otherMethod, unary}, limiterNames(e.cli.core))
}

// Configured entries still apply to unknown methods: a configured method
// keeps its name, an unknown method of a configured service uses the
// service's limiter under rpc.method _OTHER, exemptions hold.
func TestUnknownMethodsKeepConfiguredEntries(t *testing.T) {
	s, err := NewServer(WithDefault(fixed(2)), WithMethod("/a.Svc/Get", fixed(3)), WithMethod("/b.Svc/", fixed(4)), WithExempt("/c.Svc/"))
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	tab := s.tab.Load()
	tests := []struct {
		method, limiter string
		limit           int
	}{
		{"/a.Svc/Get", "a.Svc/Get", 3},
		{"/a.Svc/Put", otherMethod, 2},
		{"/b.Svc/Anything", "b.Svc/", 4},
		{"/z.Svc/Anything", otherMethod, 2},
	}
	for _, tt := range tests {
		r := tab.lookupOther(tt.method)
		require.NotNil(t, r.gate, tt.method)
		assert.Equal(t, tt.limiter, r.gate.name, tt.method)
		assert.Equal(t, tt.limit, r.gate.lim.Limit(), tt.method)
		assert.Equal(t, tt.method, r.full, "a callerkey.Func still sees the real method")
	}
	assert.Nil(t, tab.lookupOther("/c.Svc/X").gate, "exempt")
	assert.Nil(t, tab.lookupOther("/grpc.health.v1.Health/Check").gate, "exempt by default")
	assert.Same(t, tab.lookupOther("/x.Svc/A").gate, tab.lookupOther("/y.Svc/B").gate, "unknown methods share one limiter")
}

// A server without UnknownServiceHandler answers UNIMPLEMENTED before any
// interceptor runs; a client call without StaticMethod is still _OTHER.
func TestClientInvokeWithoutStaticMethod(t *testing.T) {
	e := newEnv(t, &testpb.Service{}, envConfig{noServer: true})
	err := e.conn.Invoke(context.Background(), "/made.Up/Call", &testpb.UnaryRequest{}, &testpb.UnaryResponse{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	e.awaitRelease(t, "client")
	err = e.conn.Invoke(context.Background(), unaryMethod, &testpb.UnaryRequest{}, &testpb.UnaryResponse{}, grpc.StaticMethod())
	require.NoError(t, err)
	e.awaitRelease(t, "client")
	assert.Equal(t, []string{otherMethod, "sluice.test.v1.TestService/Unary"}, limiterNames(e.cli.core))
}
