// Package waitlist is the intrusive doubly linked list of callers waiting
// for a limiter: the permits of limiter.Limiter and the tokens of
// ratelimit.Bucket. A waiter whose context ends leaves from the middle in
// O(1), and the list allocates nothing of its own.
package waitlist

// Links are the pointers a List keeps in each of its elements. Element
// types embed Links of their own type.
type Links[W any] struct {
	prev, next *W
}

// LinksOf returns l, so that a List can reach the Links its elements embed.
func (l *Links[W]) LinksOf() *Links[W] { return l }

// Linked is a pointer to an element type that embeds Links.
type Linked[W any] interface {
	*W
	LinksOf() *Links[W]
}

// A List is a doubly linked list of waiters, oldest first. The zero List
// is empty. It is not safe for concurrent use: its owner's lock guards it.
type List[W any, P Linked[W]] struct {
	head, tail *W
}

// Front returns the oldest waiter, or nil when the list is empty.
func (q *List[W, P]) Front() *W { return q.head }

// Push appends w as the newest waiter.
func (q *List[W, P]) Push(w *W) {
	P(w).LinksOf().prev = q.tail
	if q.tail != nil {
		P(q.tail).LinksOf().next = w
	} else {
		q.head = w
	}
	q.tail = w
}

// Pop removes the oldest waiter, or the newest when lifo, and returns nil
// when the list is empty.
func (q *List[W, P]) Pop(lifo bool) *W {
	w := q.head
	if lifo {
		w = q.tail
	}
	if w != nil {
		q.Remove(w)
	}
	return w
}

// Remove takes w, which must be in q, out of it.
func (q *List[W, P]) Remove(w *W) {
	l := P(w).LinksOf()
	if l.prev != nil {
		P(l.prev).LinksOf().next = l.next
	} else {
		q.head = l.next
	}
	if l.next != nil {
		P(l.next).LinksOf().prev = l.prev
	} else {
		q.tail = l.prev
	}
	l.prev, l.next = nil, nil
}
