//go:build !unix

package main

import "time"

// processCPU is not measured on this system; the report says so.
func processCPU() time.Duration { return 0 }
