package grpcname

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	_ "github.com/sluice-go/sluice/internal/testbed/testpb" // links sluice.test.v1.TestService
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheck(t *testing.T) {
	tests := []struct {
		service, method string
		want            Fault
	}{
		{"pkg.Svc", "Get", Fault{}},
		{"pkg.Svc", "", Fault{}},
		{"", "Get", Fault{Kind: Empty}},
		{"pkg/Svc", "", Fault{Kind: Slash, Part: "pkg/Svc"}},
		{"pkg.Svc", "a/b", Fault{Kind: Slash, InMethod: true, Part: "a/b"}},
		{"pkg. Svc", "", Fault{Kind: Space, Part: "pkg. Svc"}},
		{"pkg.Svc", "Do it", Fault{Kind: Space, InMethod: true, Part: "Do it"}},
		{"pkg..Svc", "", Fault{Kind: EmptyPart, Part: "pkg..Svc"}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Check(tt.service, tt.method), "%q %q", tt.service, tt.method)
	}
}

func TestLinkedFault(t *testing.T) {
	tests := []struct{ service, method, want string }{
		{"sluice.test.v1.TestService", "Unary", ""},
		{"sluice.test.v1.TestService", "", ""},
		{"not.linked.Svc", "Get", ""},
		{"sluice.test.v1.TestService", "unary", "service sluice.test.v1.TestService has no method unary; did you mean Unary? (names are case-sensitive)"},
		{"sluice.test.v1.testService", "", "no service sluice.test.v1.testService is linked into this program; did you mean sluice.test.v1.TestService? (names are case-sensitive)"},
		{"sluice.test.v1.UnaryRequest", "", "sluice.test.v1.UnaryRequest is a protobuf message, not a service"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, LinkedFault(tt.service, tt.method), "%q %q", tt.service, tt.method)
	}
	assert.True(t, Linked("sluice.test.v1.TestService"))
	assert.False(t, Linked("sluice.test.v1.UnaryRequest"))
}
