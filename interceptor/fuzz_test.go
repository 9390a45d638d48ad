package interceptor

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/interceptor/internal/testhook"
	"github.com/sluice-go/sluice/limiter"
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
		s, err := NewServer(WithMethod(name, Limit{Algorithm: limiter.FixedConfig{Limit: 3}}), WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 5}}))
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
// pushbacks (gRFC A6: an int32 of milliseconds, negative for "do not
// retry"), and those exactly.
func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "250", "-1", "+5", "1e3", "2147483647", "2147483648", "-2147483649", "9223372036855", " 5", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parsePushback(v)
		if !ok {
			if d != 0 {
				t.Fatalf("%q: refused but returned %v", v, d)
			}
			return
		}
		if (d < 0 && d != DoNotRetry) || d > math.MaxInt32*time.Millisecond || (d >= 0 && d%time.Millisecond != 0) {
			t.Fatalf("%q: accepted as %v", v, d)
		}
		if again, ok := parsePushback(formatPushback(d)); !ok || again != d {
			t.Fatalf("%q: %v does not round-trip (%v, %v)", v, d, again, ok)
		}
	})
}

// FuzzPriorityHeader checks what a server makes of any priority header a
// caller sends (two values, as when an edge proxy appends one): an
// untrusted caller's header changes nothing, a trusted caller's claim is
// a valid Priority no higher than the cap, and the last value decides.
func FuzzPriorityHeader(f *testing.F) {
	for _, s := range [][2]string{
		{"critical", "sheddable"}, {"sheddable", "critical"}, {"critical, default", ""},
		{"CRITICAL", "urgent"}, {"", ","}, {"\x00", " default "}, {"sheddable,", "x"},
	} {
		f.Add(s[0], s[1], true, int8(PriorityDefault))
	}
	f.Fuzz(func(t *testing.T, first, second string, trusted bool, claimCap int8) {
		maxClaim := Priority(min(max(claimCap, int8(PrioritySheddable)), int8(PriorityCritical)))
		s, err := NewServer(WithPriorities(Priorities{Header: "x-priority",
			Trusted: func(context.Context) bool { return trusted }, MaxClaimed: maxClaim}),
			WithMethod(unaryMethod, Limit{Algorithm: limiter.FixedConfig{Limit: 4}, Priority: PrioritySheddable}))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		md := metadata.MD{}
		for _, v := range []string{first, second} {
			if v != "" {
				md.Append("x-priority", v)
			}
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		r := s.tab.Load().lookup(unaryMethod)
		p := s.priority(ctx, r)
		if p < PrioritySheddable || p > PriorityCritical {
			t.Fatalf("%q, %q: priority %v out of range", first, second, p)
		}
		if !trusted || md.Len() == 0 {
			if p != PrioritySheddable {
				t.Fatalf("%q, %q (trusted %v): %v, want the method's own priority", first, second, trusted, p)
			}
			return
		}
		vs := md.Get("x-priority")
		last := vs[len(vs)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		want := PrioritySheddable
		if claimed, ok := parsePriority(last); ok {
			want = min(claimed, maxClaim)
		}
		if p != want {
			t.Fatalf("%q, %q: %v, want %v", first, second, p, want)
		}
	})
}

// FuzzClientPushback checks that whatever pushback trailer a server sends,
// a Client holds the rejected call's permit no longer than WithMaxPushback
// and gets it back.
func FuzzClientPushback(f *testing.F) {
	for _, s := range []string{"250", "0", "-1", "2147483647", "2147483648", "-2147483649", "1e3", "+5", " 5", ""} {
		f.Add(s)
	}
	const maxHold = 300 * time.Millisecond
	f.Fuzz(func(t *testing.T, v string) {
		c, err := NewClient(WithDefault(Limit{Algorithm: limiter.FixedConfig{Limit: 2}}), WithMaxPushback(maxHold))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		timer := &manualTimer{}
		remove := testhook.Update(c.core, func(h *testhook.Hooks) { h.AfterFunc = timer.afterFunc })
		defer remove()
		invoker := func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
			for _, o := range opts {
				if tr, ok := o.(grpc.TrailerCallOption); ok {
					*tr.TrailerAddr = metadata.Pairs(pushbackKey, v)
				}
			}
			return status.Error(codes.ResourceExhausted, "busy")
		}
		_ = c.unary(context.Background(), unaryMethod, nil, nil, nil, invoker, grpc.StaticMethod())
		for _, d := range timer.after {
			if d <= 0 || d > maxHold {
				t.Fatalf("%q: held for %v, want (0, %v]", v, d, maxHold)
			}
		}
		timer.fire()
		if n := gateOf(c.core, unaryMethod).lim.Inflight(); n != 0 {
			t.Fatalf("%q: %d permits held after the hold", v, n)
		}
	})
}
