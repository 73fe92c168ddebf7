// Package hashmix spreads 64-bit values over all their bits.
package hashmix

// Finalize is SplitMix64's finalizer (Steele, Lea and Flood): a bijection
// on uint64 whose every output bit depends on every input bit, so small
// integers, or hashes whose top bits barely move between similar inputs
// (FNV over "r1" and "r2"), come out spread evenly: a share drawn from the
// top bits is uniform, and registers picked by them are balanced.
func Finalize(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
