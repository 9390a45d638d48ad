//go:build race

package limiter

// raceEnabled shortens simulations that the race detector would slow
// tenfold without finding anything a shorter run would not.
const raceEnabled = true
