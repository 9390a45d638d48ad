//go:build !race

package limiter

const raceEnabled = false
