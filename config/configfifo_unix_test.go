//go:build unix

package config

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Attack: a config path that is a FIFO blocked Load, and the
// watcher, until something wrote to it, that is forever. A path that is
// not a regular file is refused without being opened.
func TestLoadConfigNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.json")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	sock := filepath.Join(dir, "sock.json")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer lis.Close()
	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(fifo, link))

	tests := []struct {
		name, path, is string
	}{
		{"fifo", fifo, "a named pipe (FIFO)"},
		{"symlink to a fifo", link, "a named pipe (FIFO)"},
		{"socket", sock, "a socket"},
		{"directory", dir, "a directory"},
		{"device", "/dev/null", "a device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Load(tt.path); done <- err }()
			select {
			case err := <-done:
				require.Error(t, err)
				assert.Equal(t, "config: "+tt.path+" is "+tt.is+": name a regular file", err.Error())
			case <-time.After(10 * time.Second):
				// Let the blocked open return, so that the test ends.
				if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				<-done
				require.FailNow(t, "Load blocked on "+tt.path)
			}
		})
	}
}

// Watch reports a path that became a FIFO and goes on polling.
func TestWatchConfigFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := watchConfig(t)
		require.NoError(t, os.Remove(w.path))
		require.NoError(t, syscall.Mkfifo(w.path, 0o600))
		time.Sleep(time.Second) // fake time: one poll
		synctest.Wait()
		errs := w.errs()
		require.Len(t, errs, 1)
		assert.Equal(t, "config: "+w.path+" is a named pipe (FIFO): name a regular file", errs[0].Error())
		assert.Equal(t, 3, limitOf(t, w.s, unaryMethod), "the running configuration stays")
		w.stop()
	})
}
