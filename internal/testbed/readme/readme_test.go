// Package readme checks that the Go snippets of the repository's
// documents compile: each must appear, line for line, in an example or a
// test that the build compiles and vets.
package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const root = "../../.."

// documents are the files whose Go snippets users copy.
var documents = []string{"README.md", "testdata/config/README.md", "docs/design.md", "docs/upgrading.md"}

var goBlock = regexp.MustCompile("(?s)\n```go\n(.*?)\n```")

// normalize drops indentation, blank lines and the spaces gofmt adds to
// align comments, which a snippet and the function it comes from do not
// share.
func normalize(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.Join(strings.Fields(line), " "); line != "" {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

func TestSnippetsCompile(t *testing.T) {
	var sources []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bench-out" || d.Name() == "demo-out") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, normalize(string(data)))
		}
		return nil
	}))
	require.NotEmpty(t, sources)
	blocks := 0
	for _, doc := range documents {
		data, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		for _, m := range goBlock.FindAllStringSubmatchIndex(string(data), -1) {
			blocks++
			snippet := normalize(string(data[m[2]:m[3]]))
			line := 1 + strings.Count(string(data[:m[2]]), "\n")
			found := false
			for _, src := range sources {
				if strings.Contains(src, snippet) {
					found = true
					break
				}
			}
			assert.True(t, found, "%s:%d: the snippet is in no example or test; copy it into one, line for line:\n%s", doc, line, snippet)
		}
	}
	assert.GreaterOrEqual(t, blocks, 10, "snippets checked")
}
