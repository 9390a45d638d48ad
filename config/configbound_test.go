package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// emptyEntries is a config of n method entries that name nothing: one
// problem each, three bytes each.
func emptyEntries(n int) []byte {
	return []byte(`{"methods": [` + strings.Repeat(`{},`, n-1) + `{}]}`)
}

// Attack: a config of many bad entries made validation take quadratic
// time and the error grow with the input (15k entries: 0.23 s and a 1.3
// MB error; 300k, in a 0.9 MB file, minutes). The error must list the
// first maxProblems problems and count the rest, on every way in.
func TestConfigManyProblemsBounded(t *testing.T) {
	const n = 5000
	data := emptyEntries(n)
	path := filepath.Join(t.TempDir(), "sluice.json")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	for _, tt := range []struct {
		name string
		file string
		load func() error
	}{
		{"Parse", "", func() error { _, err := Parse(data); return err }},
		{"Load", path, func() error { _, err := Load(path); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.load()
			var ce *Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, maxProblems, len(ce.Problems), "problems kept; the error is %d bytes", len(err.Error()))
			assert.Equal(t, n-maxProblems, ce.More, "problems counted, not kept")
			for i, p := range ce.Problems {
				assert.Equal(t, fmt.Sprintf("methods[%d].name", i), p.Path)
			}
			msg := err.Error()
			lines := strings.Split(msg, "\n")
			where := "configuration"
			if tt.file != "" {
				where += " " + tt.file
			}
			assert.Equal(t, fmt.Sprintf("config: invalid %s: %d problems, the first %d:", where, n, maxProblems), lines[0])
			require.Len(t, lines, 1+maxProblems+1, "a line per problem kept, and one for the rest")
			assert.Equal(t, fmt.Sprintf("\t... and %d more", n-maxProblems), lines[len(lines)-1])
			assert.Less(t, len(msg), 4096, "the error does not grow with the config")
		})
	}
}

// A problem quotes what the config said; a long value is cut, so that
// maxProblems of them stay small.
func TestConfigProblemMessageBounded(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	data := fmt.Sprintf(`{"methods": [{"name": [{"service": "a/%s"}]}, {"name": [{"service": "a/%s"}]}]}`, long, long)
	_, err := Parse([]byte(data))
	var ce *Error
	require.ErrorAs(t, err, &ce)
	require.Len(t, ce.Problems, 2)
	for _, p := range ce.Problems {
		assert.LessOrEqual(t, len(p.Message), maxProblemMessage)
		assert.True(t, strings.HasSuffix(p.Message, "..."), p.Message)
	}
	assert.Less(t, len(err.Error()), 2*maxProblemMessage+200)
}

// Problems up to the bound are all listed, with no count of more.
func TestConfigProblemsAtTheBound(t *testing.T) {
	_, err := Parse(emptyEntries(maxProblems))
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Len(t, ce.Problems, maxProblems)
	assert.Zero(t, ce.More)
	assert.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("config: invalid configuration: %d problems:\n", maxProblems)), err.Error())
	assert.NotContains(t, err.Error(), "more")
}

// BenchmarkConfigManyProblems shows validation time linear in the number
// of bad entries (it was quadratic: 15k, 30k, 60k entries took 0.23, 1.2,
// 4.8 s).
func BenchmarkConfigManyProblems(b *testing.B) {
	for _, n := range []int{15_000, 30_000, 60_000, 300_000} {
		data := emptyEntries(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse(data); err == nil {
					b.Fatal("no error")
				}
			}
		})
	}
}

// A syntax error quotes the offending token, which may be most of the
// file: it is cut too, and still unwraps to the parser's error.
func TestConfigSyntaxErrorBounded(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	for _, data := range []string{
		`{"default": {"fixed": {"limit": "` + long + `"}}}`,
		`{"` + long + `": 1}`,
	} {
		_, err := Parse([]byte(data))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "config: parsing: proto:"), err.Error())
		assert.LessOrEqual(t, len(err.Error()), len("config: parsing: ")+maxProblemMessage)
		assert.ErrorIs(t, err, proto.Error, "the parser's error is wrapped")
	}
}
