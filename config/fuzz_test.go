package config

import (
	"testing"

	"github.com/sluice-go/sluice/interceptor"
)

// FuzzParse checks that any bytes given as a config file are either
// refused with an error or give options that NewServer accepts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"default": {"aimd": {"backoff_ratio": 0.8}}}`,
		`{"methods": [{"name": [{"service": "a.B", "method": "C"}], "limit": {"fixed": {"limit": 4}}}]}`,
		`{"methods": [{"name": [{"service": ""}], "limit": {"exempt": true}}]}`,
		`{"default": {"queue": {"target": "0.05s"}, "rate_limit": {"per_second": 10}}}`,
		`{"default": {"aimdd": {}}}`,
		`{"caller_limit": {"rate_limit": {"per_second": 5, "burst": 10}, "peer_identity": {}, "max_callers": 1000}}`,
		`{"caller_limit": {"rate_limit": {"per_second": 1e-9, "burst": 2}, "ip": {"ipv4_prefix": 24, "ipv6_prefix": 48, "trusted_proxies": ["10.0.0.0/8", "fd00::/8"], "header": "x-real-ip"}}}`,
		`{"caller_limit": {"rate_limit": {"per_second": 1}, "metadata": {"header": "x-api-key"}}, "priority_header": "x-priority"}`,
		`{"caller_limit": {"rate_limit": {"per_second": 1}}}`,
		`{"caller_limit": {"rate_limit": {"per_second": 1}, "ip": {"trusted_proxies": ["10.0.0.1/33"]}}}`,
		`{"priority_header": "grpc-x"}`,
		`[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		opts, err := Parse(data)
		if err != nil {
			return
		}
		s, err := interceptor.NewServer(opts...)
		if err != nil {
			t.Fatalf("config %q was accepted but NewServer refused it: %v", data, err)
		}
		_ = s.Close()
	})
}
