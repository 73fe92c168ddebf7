package sim

import "container/list"

// lru is a bounded map from content hashes to values that forgets the least
// recently used entry past its capacity: the encoder and grammar caches,
// whose keys come from clients and so must not grow without bound. It is
// not safe for concurrent use; the engine goroutine owns each one.
type lru[V any] struct {
	cap   int
	order *list.List // of *lruEntry[V], most recently used at the back
	byKey map[uint64]*list.Element
}

type lruEntry[V any] struct {
	key uint64
	val V
}

func newLRU[V any](capacity int) *lru[V] {
	return &lru[V]{cap: max(1, capacity), order: list.New(), byKey: map[uint64]*list.Element{}}
}

// get returns the value under key and marks it used.
func (c *lru[V]) get(key uint64) (V, bool) {
	el, ok := c.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToBack(el)
	return el.Value.(*lruEntry[V]).val, true
}

// put stores a value under key, evicting the least recently used entry
// when the cache is full.
func (c *lru[V]) put(key uint64, val V) {
	if el, ok := c.byKey[key]; ok {
		el.Value.(*lruEntry[V]).val = val
		c.order.MoveToBack(el)
		return
	}
	if c.order.Len() >= c.cap {
		old := c.order.Remove(c.order.Front()).(*lruEntry[V])
		delete(c.byKey, old.key)
	}
	c.byKey[key] = c.order.PushBack(&lruEntry[V]{key: key, val: val})
}
