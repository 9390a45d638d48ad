//go:build race

package interceptor

const raceEnabled = true
