package config

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-go/sluice/interceptor"
)

// Watch polls the config file at path every interval and, when its
// contents change, reloads s with the options it describes followed by
// extra (settings a file cannot express, such as
// interceptor.WithClassifier). Server.Reload
// layers them over the options s was built with: what the file does not
// set stays as built. A file that cannot be read, is not a regular
// file, is larger than 1 MiB or is invalid changes nothing: the error goes to onError
// (log.Printf when nil) and the running configuration stays until a good
// file appears. The file's contents when Watch starts are taken as
// already applied. It returns ctx's error when ctx is done, or an error at
// once for an interval <= 0 or a nil Server.
func Watch(ctx context.Context, path string, interval time.Duration, s *interceptor.Server, onError func(error), extra ...interceptor.ServerOption) error {
	if interval <= 0 {
		return fmt.Errorf("config: Watch interval is %v, must be > 0", interval)
	}
	if s == nil {
		return fmt.Errorf("config: Watch needs a Server")
	}
	if onError == nil {
		onError = func(err error) { log.Printf("sluice: config %s not applied: %v", path, err) }
	}
	last, _ := readFile(path)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		data, err := readFile(path)
		if err != nil {
			onError(err)
			continue
		}
		if bytes.Equal(data, last) {
			continue
		}
		last = data
		opts, err := Parse(data)
		if err == nil {
			err = s.Reload(append(opts, extra...)...)
		}
		if err != nil {
			onError(err)
		}
	}
}
