package trace

// chunkBits sets the length of a chunk of buffered values (4096).
const chunkBits = 12

// chunked is a growing sequence of values held in fixed-size chunks:
// growing never copies or frees what it holds, and reset keeps the
// chunks for the next partition.
type chunked[V any] struct {
	chunks [][]V
	n      int
}

func (c *chunked[V]) add(v V) {
	k := c.n >> chunkBits
	if k == len(c.chunks) {
		c.chunks = append(c.chunks, make([]V, 1<<chunkBits))
	}
	c.chunks[k][c.n&(1<<chunkBits-1)] = v
	c.n++
}

func (c *chunked[V]) addAll(vs []V) {
	for _, v := range vs {
		c.add(v)
	}
}

// addN adds n copies of v.
func (c *chunked[V]) addN(v V, n int) {
	for range n {
		c.add(v)
	}
}

func (c *chunked[V]) at(i int) V { return c.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// appendTo appends values lo to hi to dst.
func (c *chunked[V]) appendTo(dst []V, lo, hi int) []V {
	for lo < hi {
		k, off := lo>>chunkBits, lo&(1<<chunkBits-1)
		end := min(off+hi-lo, 1<<chunkBits)
		dst = append(dst, c.chunks[k][off:end]...)
		lo += end - off
	}
	return dst
}

// permuted puts c's values, in the order of perm, into into (emptied
// first).
func (c *chunked[V]) permuted(into *chunked[V], perm []int32) {
	into.reset()
	for _, p := range perm {
		into.add(c.at(int(p)))
	}
}

// reset empties c, zeroing what it held so that strings can be collected.
func (c *chunked[V]) reset() {
	for k := 0; k<<chunkBits < c.n; k++ {
		clear(c.chunks[k])
	}
	c.n = 0
}
