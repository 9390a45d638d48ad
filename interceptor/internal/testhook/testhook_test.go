package testhook

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUpdate(t *testing.T) {
	a, b := new(int), new(int)
	assert.Nil(t, For(a), "no hooks until set")
	removeA := Update(a, func(h *Hooks) { h.Released = func() {} })
	removeB := Update(b, func(h *Hooks) { h.Rejected = func(string) {} })
	Update(a, func(h *Hooks) { h.Rejected = func(string) {} })
	require.NotNil(t, For(a))
	assert.NotNil(t, For(a).Released, "an update keeps the other hooks")
	assert.NotNil(t, For(a).Rejected)
	assert.Nil(t, For(b).Released, "owners do not share hooks")
	removeA()
	assert.Nil(t, For(a))
	removeB()
	assert.Nil(t, For(b))
}
