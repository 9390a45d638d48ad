package interceptor

import (
	"strings"
	"testing"
	"time"
)

// FuzzMethodName checks that any method name is either refused with an
// error or accepted and then matched as configured, and that looking up
// any name a client might send never fails.
func FuzzMethodName(f *testing.F) {
	for _, s := range []string{"/pkg.Svc/Method", "/pkg.Svc/", "pkg.Svc/M", "//", "/a/b/c", "/a..b/", "/\x00/m", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		service, method, err := validMethod(name)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "interceptor: method name ") {
				t.Fatalf("unexpected error text %q", err)
			}
			return
		}
		if name != "/"+service+"/"+method {
			t.Fatalf("%q split into %q and %q", name, service, method)
		}
		s, err := NewServer(WithMethod(name, Limit{Algorithm: Fixed(3)}), WithDefault(Limit{Algorithm: Fixed(5)}))
		if err != nil {
			// Naming a default exemption twice is the only other error.
			if isDefaultExempt(name) {
				return
			}
			t.Fatalf("valid name %q refused: %v", name, err)
		}
		defer func() { _ = s.Close() }()
		full := name
		if method == "" {
			full += "M"
		}
		r := s.tab.Load().lookup(full)
		if r.gate == nil || r.gate.lim.Limit() != 3 {
			t.Fatalf("%q does not match its own entry %q", full, name)
		}
		// Whatever a peer sends as a method resolves to some route.
		if s.tab.Load().lookup(strings.ToUpper(name)+"x") == nil {
			t.Fatal("nil route")
		}
	})
}

// FuzzParsePushback checks that the client accepts only well-formed
// pushbacks, and those exactly.
func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "250", "-1", "+5", "1e3", "9223372036854", "9223372036855", " 5", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParsePushback(v)
		if !ok {
			if d != 0 {
				t.Fatalf("%q: refused but returned %v", v, d)
			}
			return
		}
		if d < 0 || d%time.Millisecond != 0 {
			t.Fatalf("%q: accepted as %v", v, d)
		}
		if again, ok := ParsePushback(formatPushback(d)); !ok || again != d {
			t.Fatalf("%q: %v does not round-trip (%v, %v)", v, d, again, ok)
		}
	})
}

// FuzzParseConfig checks that any bytes given as a config file are either
// refused with an error or give options that NewServer accepts.
func FuzzParseConfig(f *testing.F) {
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
		opts, err := ParseConfig(data)
		if err != nil {
			return
		}
		s, err := NewServer(opts...)
		if err != nil {
			t.Fatalf("config %q was accepted but NewServer refused it: %v", data, err)
		}
		_ = s.Close()
	})
}
