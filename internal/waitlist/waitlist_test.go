package waitlist

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type waiter struct {
	Links[waiter]
	id int
}

func TestList(t *testing.T) {
	tests := []struct {
		name   string
		remove []int // ids removed before draining
		lifo   bool
		want   []int // ids in the order Pop returns them
	}{
		{"fifo", nil, false, []int{1, 2, 3, 4}},
		{"lifo", nil, true, []int{4, 3, 2, 1}},
		{"remove the middle", []int{2, 3}, false, []int{1, 4}},
		{"remove the ends", []int{1, 4}, true, []int{3, 2}},
		{"remove all", []int{3, 1, 4, 2}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q List[waiter, *waiter]
			ws := map[int]*waiter{}
			for id := 1; id <= 4; id++ {
				ws[id] = &waiter{id: id}
				q.Push(ws[id])
			}
			assert.Equal(t, 1, q.Front().id)
			for _, id := range tt.remove {
				q.Remove(ws[id])
				assert.Equal(t, Links[waiter]{}, ws[id].Links, "a removed waiter keeps no links")
			}
			var got []int
			for w := q.Pop(tt.lifo); w != nil; w = q.Pop(tt.lifo) {
				got = append(got, w.id)
			}
			assert.Equal(t, tt.want, got)
			assert.Nil(t, q.Front(), "drained")
		})
	}
}
