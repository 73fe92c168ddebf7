package datasets

import "unsafe"

// arenaBytes is the size of a string arena's block.
const arenaBytes = 64 << 10

// stringArena makes strings out of byte slices by copying them into
// blocks of 64 KiB, one allocation a block instead of one a string: a
// conversion makes two strings a row (its fields, its request id), and
// their allocation and collection were a tenth of its time. A block's bytes
// are written once, before any string points at them, and never again, so
// the strings are as immutable as any; a block lives while one of its
// strings does.
type stringArena struct {
	block []byte // the current block; its bytes past len are unused
}

// string returns a string holding a copy of b.
func (a *stringArena) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaBytes/8 {
		return string(b) // a long string gets its own allocation
	}
	if cap(a.block)-len(a.block) < len(b) {
		a.block = make([]byte, 0, arenaBytes)
	}
	start := len(a.block)
	a.block = append(a.block, b...)
	return unsafe.String(&a.block[start], len(b))
}
