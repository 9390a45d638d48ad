package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-s", "25ms", "-load", "1.5", "-duration", "20s", "-skip", "5s", "-out", "x"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 25*time.Millisecond, o.S)
	assert.Equal(t, 1.5, o.Load)
	assert.Equal(t, 20*time.Second, o.Duration)
	assert.Equal(t, 5*time.Second, o.Skip)
	assert.Equal(t, "go run ./fleet -s 25ms -load 1.5 -duration 20s -skip 5s -out x", o.Command)
	for _, bad := range [][]string{{"-s", "0"}, {"-load", "0"}, {"-duration", "1s"}, {"-skip", "30s"}, {"-skip", "-1s"}, {"-out", ""}, {"extra"}} {
		_, err := parseFlags(bad, io.Discard)
		assert.Error(t, err, "parseFlags(%q)", bad)
	}
}

// TestRun runs both balancers for 2 s each at a low rate and checks the
// files the example writes, not the numbers it measures.
func TestRun(t *testing.T) {
	o, err := parseFlags([]string{"-duration", "2s", "-skip", "1s", "-load", "0.2", "-out", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), o, &out), out.String())
	for _, want := range []string{"== round_robin", "== weighted_round_robin", "goodput", "wrote "} {
		assert.Contains(t, out.String(), want)
	}
	md, err := os.ReadFile(filepath.Join(o.Out, "fleet.md"))
	require.NoError(t, err)
	for _, want := range []string{"| round_robin |", "| weighted_round_robin |", "blackoutPeriod", "fleet.png"} {
		assert.True(t, strings.Contains(string(md), want), "fleet.md lacks %q", want)
	}
	png, err := os.ReadFile(filepath.Join(o.Out, "fleet.png"))
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "fleet.png is not a PNG")
}
