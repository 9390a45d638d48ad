// Package testhook lets package interceptor's tests observe a Server or
// Client and steer its timers, as grpc-go's internal packages carry its
// test hooks, so that no production type holds a field for tests. No hook
// is set outside tests, where looking one up costs an atomic load.
package testhook

import (
	"sync"
	"sync/atomic"
	"time"
)

// Hooks observe and steer one owner (a Server's or a Client's core). A nil
// func is no hook.
type Hooks struct {
	// Released runs after a call's permit is returned.
	Released func()
	// Rejected runs after a call is rejected, with the reason.
	Rejected func(reason string)
	// AfterFunc replaces time.AfterFunc: override expiries, the tap's
	// hold of an unclaimed permit, a client's pushback hold.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

var (
	set   atomic.Bool
	hooks sync.Map // owner -> *Hooks
)

// Update replaces owner's hooks with a copy of them that change has
// edited, and returns a func that removes them.
func Update(owner any, change func(*Hooks)) (remove func()) {
	var h Hooks
	if old, ok := hooks.Load(owner); ok {
		h = *old.(*Hooks)
	}
	change(&h)
	hooks.Store(owner, &h)
	set.Store(true)
	return func() { hooks.Delete(owner) }
}

// For returns owner's hooks, or nil.
func For(owner any) *Hooks {
	if !set.Load() {
		return nil
	}
	h, _ := hooks.Load(owner)
	hh, _ := h.(*Hooks)
	return hh
}
