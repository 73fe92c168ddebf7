package analyze

import "hash/maphash"

// hashSeeds key hash128: random per process, so no file can aim at a
// collision; shared by every tally of the process, so a run's keys and
// its baseline's (or the other side's) agree.
var hashSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// hash128 is s's 128-bit hash: what analysis holds of a session id, a
// request id or an output hash, a fixed size whatever its length; two of
// 2^22 such keys collide with odds below 2^-80.
func hash128(s string) [2]uint64 {
	return [2]uint64{maphash.String(hashSeeds[0], s), maphash.String(hashSeeds[1], s)}
}
