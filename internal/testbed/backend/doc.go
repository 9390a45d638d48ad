// Package backend simulates a downstream dependency of fixed capacity, such
// as a database or a connection pool, for sluice's tests, demo and
// benchmarks. Work is simulated with timers rather than CPU, so a backend
// behaves the same on a 2-core laptop and in testing/synctest bubbles,
// where a minute of overload runs in virtual time.
//
// Two disciplines are provided. FIFO has C workers and a first-in
// first-out queue in front of them: latency grows in steps as the queue
// fills. ProcessorSharing serves every call at once at rate C/n when n > C
// calls are in progress, like a CPU: every call slows down together.
//
// Both serve exactly C calls per service time while busy, even on a loaded
// machine whose timers fire late: a FIFO worker starts its next queued
// call when the last one was due to end (up to a tenth of the service
// time in the past), and processor sharing accounts work from completion
// to completion. Otherwise every protection in a benchmark would be
// measured against a backend serving a few percent under C/S, and "ideal"
// goodput would be out of reach for reasons that are not the protection's.
package backend
