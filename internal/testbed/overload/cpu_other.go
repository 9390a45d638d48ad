//go:build !unix

package overload

import "time"

// ProcessCPU is not measured on this system; the report says so.
func ProcessCPU() time.Duration { return 0 }
