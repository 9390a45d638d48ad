package config

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice/interceptor"
	_ "github.com/sluice-go/sluice/internal/testbed/testpb" // links sluice.test.v1.TestService
	"github.com/sluice-go/sluice/limiter"
	sluicev1 "github.com/sluice-go/sluice/proto/sluice/v1"
)

const exampleConfig = "../testdata/config/example.json"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const unaryMethod = "/sluice.test.v1.TestService/Unary"

// served is a server's list of services, as CheckRegistered reads it.
type served map[string]grpc.ServiceInfo

func (s served) GetServiceInfo() map[string]grpc.ServiceInfo { return s }

// limitsOf builds an interceptor.Server from opts, has it create the
// limiter of each of methods as it does for a grpc.Server serving them
// (CheckRegistered), and returns the limit of each limiter by name.
func limitsOf(t *testing.T, opts []interceptor.ServerOption, methods ...string) map[string]int {
	t.Helper()
	s, err := interceptor.NewServer(opts...)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	srv := served{}
	for _, m := range methods {
		svc, name, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		info := srv[svc]
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: name})
		srv[svc] = info
	}
	_ = s.CheckRegistered(srv) // reports configured names not in methods, which these tests leave out on purpose
	got := map[string]int{}
	for _, l := range s.Limiters() {
		got[l.Name] = l.Limit
	}
	return got
}

// limitOf is the live limit of method's limiter in s, which it creates
// first if need be, as for a grpc.Server serving method.
func limitOf(t *testing.T, s *interceptor.Server, method string) int {
	t.Helper()
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	_ = s.CheckRegistered(served{svc: {Methods: []grpc.MethodInfo{{Name: name}}}})
	for _, l := range s.Limiters() {
		if l.Name == svc+"/"+name {
			return l.Limit
		}
	}
	require.FailNow(t, "no limiter for "+method)
	return 0
}

// settingsOf reads the configuration file at path.
func settingsOf(t *testing.T, path string) settings {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var pb sluicev1.Config
	require.NoError(t, protojson.Unmarshal(data, &pb))
	st, err := read(&pb)
	require.NoError(t, err)
	return st
}

func TestLoadConfigExample(t *testing.T) {
	opts, err := Load(exampleConfig)
	require.NoError(t, err)

	c := settingsOf(t, exampleConfig)
	assert.Equal(t, &interceptor.Limit{
		Algorithm: limiter.AIMDConfig{BackoffRatio: 0.8},
		Queue:     limiter.Queue{Target: 50 * time.Millisecond},
	}, c.def)
	catalog := interceptor.Limit{
		Algorithm: limiter.VegasConfig{InitialLimit: 50},
		Queue:     limiter.Queue{Target: 20 * time.Millisecond, LIFO: true},
	}
	assert.Equal(t, []method{
		{"/shop.v1.Checkout/PlaceOrder", interceptor.Limit{
			Algorithm: limiter.AIMDConfig{InitialLimit: 20, MinLimit: 2, MaxLimit: 200, Timeout: 500 * time.Millisecond},
			Queue:     limiter.Queue{Size: 8},
			Priority:  interceptor.PriorityCritical,
		}},
		{"/shop.v1.Search/", interceptor.Limit{
			Algorithm: limiter.Gradient2Config{MaxLimit: 500},
			Rate:      interceptor.RateLimit{PerSecond: 200, Burst: 50},
			Priority:  interceptor.PrioritySheddable,
			DryRun:    true,
		}},
		{"/shop.v1.Catalog/GetItem", catalog},
		{"/shop.v1.Catalog/ListItems", catalog},
		{"/shop.v1.Reports/Export", interceptor.Limit{Algorithm: limiter.FixedConfig{Limit: 4}}},
		{"/shop.v1.Internal/", interceptor.Limit{Exempt: true}},
	}, c.methods)
	require.NotNil(t, c.quota)
	assert.Equal(t, [3]float64{50, 100, 200_000}, [3]float64{c.quota.perSecond, float64(c.quota.burst), float64(c.quota.maxCallers)})
	assert.Equal(t, "x-priority", c.header)
	assert.NotNil(t, c.fairKey, "fair_share")
	key := c.quota.key
	behind := func(peerAddr string, xff ...string) context.Context {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(peerAddr))})
		return metadata.NewIncomingContext(ctx, metadata.MD{"x-forwarded-for": xff})
	}
	assert.Equal(t, "198.51.100.7", key(behind("10.1.1.1:9", "6.6.6.6, 198.51.100.7"), unaryMethod), "behind a trusted proxy")
	assert.Equal(t, "192.0.2.1", key(behind("192.0.2.1:9", "198.51.100.7"), unaryMethod), "direct")
	assert.Equal(t, "2001:db8:0:100::/56", key(behind("[2001:db8:0:1ff::1]:9"), unaryMethod), "IPv6 by /56")

	assert.Equal(t, map[string]int{
		"shop.v1.Checkout/PlaceOrder": 20,
		"shop.v1.Checkout/Other":      1000, // the default AIMD, until its first call returns
		"shop.v1.Search/":             20,   // one limiter for the service
		"shop.v1.Catalog/GetItem":     50,
		"shop.v1.Catalog/ListItems":   50,
		"shop.v1.Reports/Export":      4,
	}, limitsOf(t, opts,
		"/shop.v1.Checkout/PlaceOrder", "/shop.v1.Checkout/Other",
		"/shop.v1.Search/Find", "/shop.v1.Search/Suggest",
		"/shop.v1.Catalog/GetItem", "/shop.v1.Catalog/ListItems",
		"/shop.v1.Reports/Export", "/shop.v1.Internal/Debug"))
}

// TestConfigRoundTrip: JSON -> Config -> JSON -> options gives the same
// options as the Config itself.
func TestConfigRoundTrip(t *testing.T) {
	data, err := os.ReadFile(exampleConfig)
	require.NoError(t, err)
	var pb sluicev1.Config
	require.NoError(t, protojson.Unmarshal(data, &pb))

	js, err := protojson.Marshal(&pb)
	require.NoError(t, err)
	fromJSON, err := Parse(js)
	require.NoError(t, err)
	var again sluicev1.Config
	require.NoError(t, protojson.Unmarshal(js, &again))
	want, err := read(&pb)
	require.NoError(t, err)
	got, err := read(&again)
	require.NoError(t, err)
	assert.Equal(t, len(mustOptions(t, &pb)), len(fromJSON))
	assert.Equal(t, want.def, got.def)
	assert.Equal(t, want.methods, got.methods)
	want.quota.key, got.quota.key = nil, nil // funcs do not compare
	assert.Equal(t, want.quota, got.quota)
	assert.Equal(t, want.header, got.header)
}

func TestConfigOptionsNil(t *testing.T) {
	opts, err := Options(nil)
	assert.NoError(t, err)
	assert.Empty(t, opts)
}

func mustOptions(t *testing.T, c *sluicev1.Config) []interceptor.ServerOption {
	t.Helper()
	opts, err := Options(c)
	require.NoError(t, err)
	return opts
}

// TestConfigLimits: each algorithm's configured limit is the live limit of
// the limiters built from the file.
func TestConfigLimits(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		methods []string
		want    map[string]int
	}{
		{"empty", `{}`, []string{"/a.S/M"}, map[string]int{"a.S/M": 1000}}, // AIMD admits all until a call returns
		{"default aimd", `{"default": {"aimd": {"initial_limit": 7}}}`,
			[]string{"/a.S/M", "/a.S/N"}, map[string]int{"a.S/M": 7, "a.S/N": 7}},
		{"aimd starts at max", `{"default": {"aimd": {"min_limit": 30, "max_limit": 500}}}`,
			[]string{"/a.S/M"}, map[string]int{"a.S/M": 500}},
		{"vegas", `{"methods": [{"name": [{"service": "a.S", "method": "M"}], "limit": {"vegas": {"initial_limit": 9}}}]}`,
			[]string{"/a.S/M", "/a.S/N"}, map[string]int{"a.S/M": 9, "a.S/N": 1000}},
		{"gradient2 service", `{"methods": [{"name": [{"service": "a.S"}], "limit": {"gradient2": {"initial_limit": 11, "max_limit": 11}}}]}`,
			[]string{"/a.S/M", "/a.S/N"}, map[string]int{"a.S/": 11}},
		{"fixed, camelCase names", `{"methods": [{"name": [{"service": "a.S", "method": "M"}], "limit": {"fixed": {"limit": 3}, "rateLimit": {"perSecond": 5}}}]}`,
			[]string{"/a.S/M"}, map[string]int{"a.S/M": 3}},
		{"exempt default", `{"default": {"exempt": true}, "methods": [{"name": [{"service": "a.S", "method": "M"}], "limit": {"fixed": {"limit": 2}}}]}`,
			[]string{"/a.S/M", "/a.S/N"}, map[string]int{"a.S/M": 2}},
		{"health exemption replaced", `{"methods": [{"name": [{"service": "grpc.health.v1.Health"}], "limit": {"fixed": {"limit": 1}}}]}`,
			[]string{"/grpc.health.v1.Health/Check"}, map[string]int{"grpc.health.v1.Health/": 1}},
		{"entry without limit", `{"methods": [{"name": [{"service": "a.S"}]}]}`,
			[]string{"/a.S/M", "/a.S/N"}, map[string]int{"a.S/": 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := Parse([]byte(tt.json))
			require.NoError(t, err)
			assert.Equal(t, tt.want, limitsOf(t, opts, tt.methods...))
		})
	}
}

// TestConfigBehaviour: the configured limits hold calls back.
func TestConfigBehaviour(t *testing.T) {
	opts, err := Parse([]byte(`{
		"methods": [
			{"name": [{"service": "a.S", "method": "One"}], "limit": {"fixed": {"limit": 1}}},
			{"name": [{"service": "a.S", "method": "Rate"}], "limit": {"rate_limit": {"per_second": 0.001, "burst": 2}}},
			{"name": [{"service": "a.S", "method": "Free"}], "limit": {"exempt": true}}
		],
		"default": {"fixed": {"limit": 1}}
	}`))
	require.NoError(t, err)
	s, err := interceptor.NewServer(opts...)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	unary := s.UnaryServerInterceptor()
	call := func(method string, h grpc.UnaryHandler) error {
		_, err := unary(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: method}, h)
		return err
	}
	ok := func(context.Context, any) (any, error) { return nil, nil }

	// While a call holds the only permit of One (and of Free, if it had
	// a limiter), a second call of One is rejected and Free runs.
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- call("/a.S/One", func(context.Context, any) (any, error) {
			close(entered)
			<-release
			return nil, nil
		})
	}()
	<-entered
	assert.Equal(t, codes.ResourceExhausted, status.Code(call("/a.S/One", ok)))
	for range 3 {
		assert.NoError(t, call("/a.S/Free", ok))
	}
	close(release)
	require.NoError(t, <-done)
	assert.NoError(t, call("/a.S/One", ok))

	// A burst of 2 at 0.001/s: the third call is over the rate.
	assert.NoError(t, call("/a.S/Rate", ok))
	assert.NoError(t, call("/a.S/Rate", ok))
	err = call("/a.S/Rate", ok)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "rate limit")
}

func TestConfigErrors(t *testing.T) {
	const prefix = "config: invalid configuration: "
	method := func(name, limit string) string {
		return `{"methods": [{"name": [` + name + `], "limit": {` + limit + `}}]}`
	}
	aimd := func(fields string) string { return `{"default": {"aimd": {` + fields + `}}}` }
	tests := []struct {
		name, json, want string
	}{
		{"backoff too high", aimd(`"backoff_ratio": 1.2`),
			"default.aimd.backoff_ratio: 1.2 is not in [0.5, 1)"},
		{"backoff too low", aimd(`"backoff_ratio": 0.4`),
			"default.aimd.backoff_ratio: 0.4 is not in [0.5, 1)"},
		{"backoff NaN", aimd(`"backoff_ratio": "NaN"`),
			"default.aimd.backoff_ratio: NaN is not in [0.5, 1)"},
		{"negative timeout", aimd(`"timeout": "-1s"`),
			"default.aimd.timeout: -1s is not >= 0"},
		{"timeout out of Go's range", aimd(`"timeout": "315576000000s"`),
			"default.aimd.timeout: 315576000000s is out of range: at most 2562047h47m16s"},
		{"negative min", aimd(`"min_limit": -1`),
			"default.aimd.min_limit: -1 is not in [1, 1048576]"},
		{"max too large", aimd(`"max_limit": 2000000`),
			"default.aimd.max_limit: 2000000 is not in [1, 1048576]"},
		{"min above max", aimd(`"min_limit": 50, "max_limit": 10`),
			"default.aimd.min_limit: 50 is not <= max_limit (10)"},
		{"initial above max", aimd(`"initial_limit": 50, "max_limit": 10`),
			"default.aimd.initial_limit: 50 is not in [min_limit, max_limit] = [1, 10]"},
		{"initial below min", aimd(`"initial_limit": 5, "min_limit": 10`),
			"default.aimd.initial_limit: 5 is not in [min_limit, max_limit] = [10, 1000]"},
		{"vegas default initial below min", `{"default": {"vegas": {"min_limit": 50, "max_limit": 100}}}`,
			"default.vegas.initial_limit: default 20 is not in [min_limit, max_limit] = [50, 100]"},
		{"gradient2 min above default max, no initial", `{"default": {"gradient2": {"min_limit": 300}}}`,
			"default.gradient2.min_limit: 300 is not <= max_limit (default 200)"},
		{"vegas beta below default alpha", `{"default": {"vegas": {"beta": 2}}}`,
			"default.vegas.beta: 2 is not > alpha (default 3)"},
		{"vegas default beta below alpha", `{"default": {"vegas": {"alpha": 10}}}`,
			"default.vegas.beta: default 6 is not > alpha (10)"},
		{"vegas negative alpha", `{"default": {"vegas": {"alpha": -1}}}`,
			"default.vegas.alpha: -1 is not > 0"},
		{"vegas smoothing", `{"default": {"vegas": {"smoothing": 1.5}}}`,
			"default.vegas.smoothing: 1.5 is not in (0, 1]"},
		{"vegas probe multiplier", `{"default": {"vegas": {"probe_multiplier": -2}}}`,
			"default.vegas.probe_multiplier: -2 is not >= 1"},
		{"gradient2 queue size", `{"default": {"gradient2": {"queue_size": -1}}}`,
			"default.gradient2.queue_size: -1 is not >= 0"},
		{"gradient2 smoothing", `{"default": {"gradient2": {"smoothing": -0.5}}}`,
			"default.gradient2.smoothing: -0.5 is not in (0, 1]"},
		{"gradient2 long window", `{"default": {"gradient2": {"long_window": -1}}}`,
			"default.gradient2.long_window: -1 is not >= 1"},
		{"fixed without limit", `{"default": {"fixed": {}}}`,
			"default.fixed.limit: 0 is not in [1, 1048576]"},
		{"queue size", `{"default": {"queue": {"size": -1}}}`,
			"default.queue.size: -1 is not in [0, 1048576]"},
		{"queue target zero", `{"default": {"queue": {"target": "0s"}}}`,
			"default.queue.target: 0s is not > 0"},
		{"rate burst without rate", `{"default": {"rate_limit": {"burst": 5}}}`,
			"default.rate_limit.per_second: 0 is not a finite number > 0"},
		{"rate infinite", `{"default": {"rate_limit": {"per_second": "Infinity"}}}`,
			"default.rate_limit.per_second: +Inf is not a finite number > 0"},
		{"rate negative burst", `{"default": {"rate_limit": {"per_second": 1, "burst": -1}}}`,
			"default.rate_limit.burst: -1 is not >= 0"},
		{"unknown priority number", `{"default": {"priority": 9}}`,
			"default.priority: 9 is not PRIORITY_CRITICAL, PRIORITY_DEFAULT or PRIORITY_SHEDDABLE"},
		{"exempt with settings", `{"default": {"exempt": true, "fixed": {"limit": 1}, "queue": {}, "priority": "PRIORITY_CRITICAL"}}`,
			"default.exempt: true conflicts with fixed, queue, priority: an exempt method has no limiter"},
		{"no names", `{"methods": [{"limit": {"fixed": {"limit": 1}}}]}`,
			"methods[0].name: is empty: name at least one service, or a service and a method"},
		{"empty service", method(`{"service": "a.S"}, {"method": "M"}`, ``),
			"methods[0].name[1]: service is empty"},
		{"service with slash", method(`{"service": "/a.S"}`, ``),
			`methods[0].name[0]: service "/a.S" contains '/': want a full service name, "package.Service"`},
		{"service with space", method(`{"service": "a. S"}`, ``),
			`methods[0].name[0]: service "a. S" contains spaces or control characters`},
		{"service with empty part", method(`{"service": "a..S"}`, ``),
			`methods[0].name[0]: service "a..S" has an empty name part`},
		{"method with slash", method(`{"service": "a.S", "method": "M/N"}`, ``),
			`methods[0].name[0]: method "M/N" contains '/': want a method name, or nothing for the whole service`},
		{"duplicate in one entry", method(`{"service": "a.S", "method": "M"}, {"service": "a.S", "method": "M"}`, ``),
			`methods[0].name[1]: "/a.S/M" is already configured by methods[0].name[0]`},
		{"nested path", `{"methods": [{"name": [{"service": "a.S"}]}, {"name": [{"service": "b.S"}], "limit": {"aimd": {"backoff_ratio": 1.2}}}]}`,
			"methods[1].limit.aimd.backoff_ratio: 1.2 is not in [0.5, 1)"},
	}
	caller := func(fields string) string { return `{"caller_limit": {` + fields + `}}` }
	const rate = `"rate_limit": {"per_second": 1}, `
	tests = append(tests, []struct{ name, json, want string }{
		{"caller limit without a rate", caller(`"peer_identity": {}`),
			"caller_limit.rate_limit.per_second: 0 is not in [1e-09, 1e+09]: each caller's quota is required"},
		{"caller limit rate NaN", caller(`"rate_limit": {"per_second": "NaN"}, "peer_identity": {}`),
			"caller_limit.rate_limit.per_second: NaN is not in [1e-09, 1e+09]: each caller's quota is required"},
		{"caller limit negative burst", caller(`"rate_limit": {"per_second": 1, "burst": -1}, "peer_identity": {}`),
			"caller_limit.rate_limit.burst: -1 is not >= 0"},
		{"caller limit burst too slow", caller(`"rate_limit": {"per_second": 1e-9, "burst": 3}, "peer_identity": {}`),
			"caller_limit.rate_limit.burst: 3 at 1e-09 a second takes more than 73 years to refill"},
		{"caller limit without a key", caller(`"rate_limit": {"per_second": 1}`),
			"caller_limit: sets no key: set ip, peer_identity or metadata"},
		{"ipv4 prefix", caller(rate + `"ip": {"ipv4_prefix": 33}`),
			"caller_limit.ip.ipv4_prefix: 33 is not in [1, 32] (0 for 32)"},
		{"ipv6 prefix", caller(rate + `"ip": {"ipv6_prefix": -1}`),
			"caller_limit.ip.ipv6_prefix: -1 is not in [1, 128] (0 for 64)"},
		{"trusted proxy not a network", caller(rate + `"ip": {"trusted_proxies": ["10.0.0.0/8", "10.0.0.1"]}`),
			`caller_limit.ip.trusted_proxies[1]: "10.0.0.1" is not a network in CIDR form, such as "10.0.0.0/8" or "2001:db8::/32"`},
		{"header without proxies", caller(rate + `"ip": {"header": "x-real-ip"}`),
			`caller_limit.ip.header: "x-real-ip" is set but trusted_proxies is empty: a header is only believed from a trusted proxy`},
		{"bad header", caller(rate + `"ip": {"header": "x real ip", "trusted_proxies": ["10.0.0.0/8"]}`),
			`caller_limit.ip.header: "x real ip" is not a metadata key: use letters, digits, '-', '_' and '.'`},
		{"metadata without header", caller(rate + `"metadata": {}`),
			`caller_limit.metadata.header: is empty: name the header, such as "x-api-key"`},
		{"metadata binary header", caller(rate + `"metadata": {"header": "x-key-bin"}`),
			`caller_limit.metadata.header: "x-key-bin" is a binary header (suffix "-bin"); name a text one`},
		{"negative max callers", caller(rate + `"peer_identity": {}, "max_callers": -5`),
			"caller_limit.max_callers: -5 is not in [1, 2147483647] (0 for 100000)"},
		{"fair share without a key", `{"fair_share": {}}`,
			"fair_share: sets no key: set ip, peer_identity or metadata"},
		{"fair share metadata without header", `{"fair_share": {"metadata": {}}}`,
			`fair_share.metadata.header: is empty: name the header, such as "x-api-key"`},
		{"fair share ipv4 prefix", `{"fair_share": {"ip": {"ipv4_prefix": 40}}}`,
			"fair_share.ip.ipv4_prefix: 40 is not in [1, 32] (0 for 32)"},
		{"reserved priority header", `{"priority_header": "grpc-priority"}`,
			`priority_header: "grpc-priority" is reserved by gRPC (prefix "grpc-")`},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := Parse([]byte(tt.json))
			require.Error(t, err)
			assert.Nil(t, opts)
			assert.Equal(t, prefix+tt.want, err.Error())
			var ce *Error
			require.ErrorAs(t, err, &ce)
			assert.Len(t, ce.Problems, 1)
		})
	}
}

// TestConfigEveryProblem: one error lists every problem, in file order.
func TestConfigEveryProblem(t *testing.T) {
	_, err := Parse([]byte(`{
		"default": {"vegas": {"beta": 2, "smoothing": 2}},
		"methods": [
			{"name": [{"service": "pkg.Svc", "method": "M"}, {"method": "X"}]},
			{"name": [{"service": "pkg.Svc", "method": "N"}], "limit": {"fixed": {"limit": 5}}},
			{"name": [{"service": "pkg.Svc", "method": "O"}], "limit": {"aimd": {"backoff_ratio": 1.2, "min_limit": -3}, "queue": {"size": -1}}},
			{"name": [{"service": "pkg.Svc", "method": "M"}, {"service": "pkg.Svc", "method": "N"}]}
		]
	}`))
	require.Error(t, err)
	assert.Equal(t, `config: invalid configuration: 8 problems:
	default.vegas.beta: 2 is not > alpha (default 3)
	default.vegas.smoothing: 2 is not in (0, 1]
	methods[0].name[1]: service is empty
	methods[2].limit.aimd.min_limit: -3 is not in [1, 1048576]
	methods[2].limit.aimd.backoff_ratio: 1.2 is not in [0.5, 1)
	methods[2].limit.queue.size: -1 is not in [0, 1048576]
	methods[3].name[0]: "/pkg.Svc/M" is already configured by methods[0]`+"\n\t"+
		`methods[3].name[1]: "/pkg.Svc/N" is already configured by methods[1]`, err.Error())
}

func TestConfigDuplicateNames(t *testing.T) {
	_, err := Parse([]byte(`{"methods": [
		{"name": [{"service": "pkg.Svc"}]},
		{"name": [{"service": "pkg.Svc", "method": "M"}]},
		{"name": [{"service": "other.Svc"}]},
		{"name": [{"service": "pkg.Svc", "method": "M"}]}
	]}`))
	require.Error(t, err)
	assert.Equal(t, `config: invalid configuration: methods[3].name[0]: "/pkg.Svc/M" is already configured by methods[1]`, err.Error())

	// A service entry and a method entry of the service are not duplicates.
	_, err = Parse([]byte(`{"methods": [{"name": [{"service": "pkg.Svc"}, {"service": "pkg.Svc", "method": "M"}]}]}`))
	assert.NoError(t, err)
}

func TestConfigUnknownField(t *testing.T) {
	for _, js := range []string{
		`{"default": {"aimd": {"backof_ratio": 0.8}}}`,
		`{"defaults": {}}`,
		`{"methods": [{"names": []}]}`,
	} {
		_, err := Parse([]byte(js))
		require.Error(t, err, js)
		assert.True(t, strings.HasPrefix(err.Error(), "config: parsing: proto:"), err.Error())
		assert.Contains(t, err.Error(), "unknown field", js)
	}

	path := filepath.Join(t.TempDir(), "sluice.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"default": {"fixed": {"limit": 2, "max": 3}}}`), 0o600))
	_, err := Load(path)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "config: parsing "+path+": proto:"), err.Error())
	assert.Contains(t, err.Error(), `unknown field "max"`)
}

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.json"))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	path := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"methods": [{"name": [{"method": "M"}]}]}`), 0o600))
	_, err = Load(path)
	require.Error(t, err)
	assert.Equal(t, "config: invalid configuration "+path+": methods[0].name[0]: service is empty", err.Error())
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, path, ce.File)
	assert.Equal(t, []Problem{{Path: "methods[0].name[0]", Message: "service is empty"}}, ce.Problems)

	_, err = Parse([]byte(`{"default": `))
	assert.ErrorContains(t, err, "config: parsing: proto:")
}

// TestConfigMatchesLimiter checks that a file's interceptor.Limit is accepted if and
// only if interceptor.NewServer accepts the interceptor.Limit it converts to: the algorithm and
// queue are checked by package limiter for both, but the file's own checks
// (the rate limit, the priority enum, durations) are separate.
func TestConfigMatchesLimiter(t *testing.T) {
	d := durationpb.New
	limits := []*sluicev1.Limit{
		{},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{BackoffRatio: 0.5}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{BackoffRatio: 0.9999}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{BackoffRatio: 1}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{BackoffRatio: 0.49}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{MinLimit: 30}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{MaxLimit: 5}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{MinLimit: 2000}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{MinLimit: 2000, MaxLimit: 1500}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{InitialLimit: 1500}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{InitialLimit: 1 << 20, MaxLimit: 1 << 20}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{InitialLimit: 1<<20 + 1}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{InitialLimit: 10, MinLimit: 20}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{Timeout: d(-time.Nanosecond)}}},
		{Algorithm: &sluicev1.Limit_Aimd{Aimd: &sluicev1.Aimd{Timeout: d(time.Nanosecond)}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{InitialLimit: 1500}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{MinLimit: 30}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{Alpha: 6}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{Alpha: 5.9}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{Beta: 3}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{Smoothing: 1}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{Smoothing: 1.01}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{ProbeMultiplier: 1}}},
		{Algorithm: &sluicev1.Limit_Vegas{Vegas: &sluicev1.Vegas{ProbeMultiplier: -1}}},
		{Algorithm: &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{InitialLimit: 300}}},
		{Algorithm: &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{MinLimit: 201}}},
		{Algorithm: &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{MinLimit: 21}}},
		{Algorithm: &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{QueueSize: -1}}},
		{Algorithm: &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{LongWindow: -1}}},
		{Algorithm: &sluicev1.Limit_Gradient2{Gradient2: &sluicev1.Gradient2{Smoothing: 0.001}}},
		{Algorithm: &sluicev1.Limit_Fixed{Fixed: &sluicev1.Fixed{Limit: 1}}},
		{Algorithm: &sluicev1.Limit_Fixed{Fixed: &sluicev1.Fixed{Limit: 1 << 20}}},
		{Algorithm: &sluicev1.Limit_Fixed{Fixed: &sluicev1.Fixed{Limit: 1<<20 + 1}}},
		{Algorithm: &sluicev1.Limit_Fixed{Fixed: &sluicev1.Fixed{Limit: -1}}},
		{Queue: &sluicev1.Queue{Bound: &sluicev1.Queue_Size{Size: 1 << 20}}},
		{Queue: &sluicev1.Queue{Bound: &sluicev1.Queue_Size{Size: 1<<20 + 1}}},
		{Queue: &sluicev1.Queue{Bound: &sluicev1.Queue_Size{Size: 0}}},
		{Queue: &sluicev1.Queue{Bound: &sluicev1.Queue_Target{Target: d(-time.Second)}}},
		{Queue: &sluicev1.Queue{Bound: &sluicev1.Queue_Target{Target: d(time.Nanosecond)}}},
		{RateLimit: &sluicev1.RateLimit{PerSecond: 1e-9}},
		{RateLimit: &sluicev1.RateLimit{PerSecond: 1e9}},
		{RateLimit: &sluicev1.RateLimit{PerSecond: -1}},
		{RateLimit: &sluicev1.RateLimit{Burst: 1}},
		{RateLimit: &sluicev1.RateLimit{PerSecond: 1, Burst: -1}},
		{RateLimit: &sluicev1.RateLimit{}},
		{Priority: sluicev1.Priority_PRIORITY_SHEDDABLE},
		{Priority: sluicev1.Priority_PRIORITY_DEFAULT},
		{Priority: sluicev1.Priority_PRIORITY_CRITICAL},
	}
	for _, l := range limits {
		var ps cfgProblems
		lim := cfgLimit(&ps, "default", l)
		_, err := interceptor.NewServer(interceptor.WithDefault(lim))
		if len(ps.list) == 0 {
			assert.NoError(t, err, "%v: accepted by the config, rejected by interceptor.NewServer", l)
		} else {
			assert.Error(t, err, "%v: rejected by the config (%v), accepted by interceptor.NewServer", l, ps.list)
		}
	}
}

func ExampleParse() {
	opts, err := Parse([]byte(`{
		"default": {"aimd": {"max_limit": 500}},
		"methods": [{
			"name": [{"service": "shop.v1.Checkout", "method": "PlaceOrder"}],
			"limit": {"fixed": {"limit": 16}, "queue": {"size": 4}}
		}]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := interceptor.NewServer(opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	_ = grpc.NewServer(srv.ServerOptions()...)

	_, err = Parse([]byte(`{"methods": [{"name": [{"method": "PlaceOrder"}], "limit": {"aimd": {"backoff_ratio": 1.2}}}]}`))
	fmt.Println(err)
	// Output:
	// config: invalid configuration: 2 problems:
	//	methods[0].name[0]: service is empty
	//	methods[0].limit.aimd.backoff_ratio: 1.2 is not in [0.5, 1)
}

func TestConfigCallerLimitErrors(t *testing.T) {
	_, err := Parse([]byte(`{"caller_limit": {"rate_limit": {"per_second": 1}, "ip": {"trusted_proxies": ["10.0.0.0/8", ""]}}, "priority_header": "x prio"}`))
	assert.Equal(t, `config: invalid configuration: 2 problems:
	caller_limit.ip.trusted_proxies[1]: "" is not a network in CIDR form, such as "10.0.0.0/8" or "2001:db8::/32"`+"\n\t"+
		`priority_header: "x prio" is not a metadata key: use letters, digits, '-', '_' and '.'`, err.Error())
}

// TestConfigCallerLimitApplies: a quota from the file limits callers, each
// key kind naming them as its callerkey.Func does.
func TestConfigCallerLimitApplies(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ctx  func(caller string) context.Context
	}{
		{"metadata", `"metadata": {"header": "X-Api-Key"}`, func(caller string) context.Context {
			return metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", caller))
		}},
		{"ip", `"ip": {}`, func(caller string) context.Context {
			return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2." + caller), Port: 1}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := Parse([]byte(`{"caller_limit": {"rate_limit": {"per_second": 0.001, "burst": 2}, ` + tt.key + `}}`))
			require.NoError(t, err)
			s, err := interceptor.NewServer(opts...)
			require.NoError(t, err)
			defer func() { assert.NoError(t, s.Close()) }()
			unary := s.UnaryServerInterceptor()
			ok := func(context.Context, any) (any, error) { return nil, nil }
			admitted := map[string]int{}
			for range 5 {
				for _, caller := range []string{"1", "2"} {
					if _, err := unary(tt.ctx(caller), nil, &grpc.UnaryServerInfo{FullMethod: unaryMethod}, ok); err == nil {
						admitted[caller]++
					}
				}
			}
			assert.Equal(t, map[string]int{"1": 2, "2": 2}, admitted)
		})
	}
}

// TestConfigFairShare: the file's fair_share shares a limit of 8: beside a
// light caller holding one permit, a heavy one gets six, then is turned
// away for its share.
func TestConfigFairShare(t *testing.T) {
	opts, err := Parse([]byte(`{"default": {"fixed": {"limit": 8}}, "fair_share": {"metadata": {"header": "x-tenant"}}}`))
	require.NoError(t, err)
	s, err := interceptor.NewServer(opts...)
	require.NoError(t, err)
	defer func() { assert.NoError(t, s.Close()) }()
	unary := s.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	as := func(tenant string) context.Context {
		return metadata.NewIncomingContext(t.Context(), metadata.Pairs("x-tenant", tenant))
	}
	release := make(chan struct{})
	entered := make(chan struct{})
	block := func(context.Context, any) (any, error) { entered <- struct{}{}; <-release; return nil, nil }
	var wg sync.WaitGroup
	for _, tenant := range []string{"light", "heavy", "heavy", "heavy", "heavy", "heavy", "heavy"} {
		wg.Go(func() {
			_, err := unary(as(tenant), nil, info, block)
			assert.NoError(t, err)
		})
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			close(release)
			require.FailNow(t, "a call of "+tenant+" was not admitted")
		}
	}
	_, err = unary(as("heavy"), nil, info, block)
	assert.ErrorContains(t, err, "for a caller over its fair share")
	close(release)
	wg.Wait()
}

// TestConfigDryRun checks the file's two dry-run switches.
func TestConfigDryRun(t *testing.T) {
	for _, tt := range []struct {
		name, json string
	}{
		{"everything", `{"dry_run": true}`},
		{"one service", `{"methods": [{"name": [{"service": "sluice.test.v1.TestService"}], "limit": {"fixed": {"limit": 1}, "dry_run": true}}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := Parse([]byte(tt.json))
			require.NoError(t, err)
			s, err := interceptor.NewServer(opts...)
			require.NoError(t, err)
			defer func() { assert.NoError(t, s.Close()) }()
			_, err = s.UnaryServerInterceptor()(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: unaryMethod},
				func(context.Context, any) (any, error) { return nil, nil })
			require.NoError(t, err)
			require.Len(t, s.Limiters(), 1)
			assert.True(t, s.Limiters()[0].DryRun)
		})
	}
	_, err := Parse([]byte(`{"default": {"exempt": true, "dry_run": true}}`))
	assert.ErrorContains(t, err, "default.exempt: true conflicts with dry_run")
}

// TestConfigDurationHint: protojson reads a Duration only as seconds with
// an "s" suffix, and its own message does not say so.
func TestConfigDurationHint(t *testing.T) {
	tests := []struct{ value, want string }{
		{`"50ms"`, `invalid google.protobuf.Duration value "50ms": write a duration as seconds with an "s" suffix: "0.05s" for 50ms`},
		{`"1m30s"`, `invalid google.protobuf.Duration value "1m30s": write a duration as seconds with an "s" suffix: "90s" for 1m30s`},
		{`"5"`, `invalid google.protobuf.Duration value "5": write a duration as seconds with an "s" suffix, such as "0.050s" or "60s"`},
		{`"` + strings.Repeat("1s", 1000) + `"`, `write a duration as seconds with an "s" suffix: "1000s"`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(`{"default": {"queue": {"target": ` + tt.value + `}}}`))
		require.Error(t, err)
		// protojson's own prefix ("proto:" and a space it varies on
		// purpose from build to build) is not ours to pin.
		assert.True(t, strings.HasPrefix(err.Error(), "config: parsing: proto:"), err.Error())
		assert.True(t, strings.HasSuffix(err.Error(), tt.want), err.Error())
		assert.Less(t, len(err.Error()), len("config: parsing: ")+maxProblemMessage+100, "bounded")
	}
	_, err := Parse([]byte(`{"default": {"queue": {"target": "0.050s"}}}`))
	assert.NoError(t, err)
}

// A name the linked protobuf definitions rule out is a problem of the file.
func TestConfigUnservableName(t *testing.T) {
	_, err := Parse([]byte(`{"methods": [{"name": [{"service": "sluice.test.v1.TestService", "method": "Unarycall"}], "limit": {"fixed": {"limit": 1}}}]}`))
	assert.EqualError(t, err, "config: invalid configuration: methods[0].name[0]: cannot be served: "+
		"service sluice.test.v1.TestService has no method Unarycall; its methods are Unary, ServerStream, ClientStream, Bidi")
}
