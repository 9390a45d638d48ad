package ratelimit

// links are the pointers a waitList keeps in each of its elements, so that
// a waiter whose context ends can leave from the middle in O(1). Element
// types embed links of their own type.
type links[W any] struct {
	prev, next *W
}

func (l *links[W]) linksOf() *links[W] { return l }

// linked is a pointer to an element type that embeds links.
type linked[W any] interface {
	*W
	linksOf() *links[W]
}

// waitList is an intrusive doubly linked list of waiters, shared by
// Limiter (permits) and Bucket (tokens).
type waitList[W any, P linked[W]] struct {
	head, tail *W
}

func (q *waitList[W, P]) push(w *W) {
	P(w).linksOf().prev = q.tail
	if q.tail != nil {
		P(q.tail).linksOf().next = w
	} else {
		q.head = w
	}
	q.tail = w
}

func (q *waitList[W, P]) remove(w *W) {
	l := P(w).linksOf()
	if l.prev != nil {
		P(l.prev).linksOf().next = l.next
	} else {
		q.head = l.next
	}
	if l.next != nil {
		P(l.next).linksOf().prev = l.prev
	} else {
		q.tail = l.prev
	}
	l.prev, l.next = nil, nil
}
