package analyze

import (
	"math"
	"math/bits"

	"github.com/servetrace/servetrace/internal/hashmix"
)

// distinctCounter counts distinct int64 ids (prefix block ids) in bounded
// memory: exactly in a set up to exactDistinct ids, then by HyperLogLog
// with 2^hllBits registers, whose relative standard error is
// 1.04/√2^hllBits (0.41%). A streamed analysis's prefix reuse share is
// 1 − distinct/total: each id is new once, whatever the order of sends.
type distinctCounter struct {
	exact map[int64]struct{}
	regs  []uint8 // nil while exact
}

const (
	exactDistinct = 1 << 20
	hllBits       = 16
)

// distinctRelErr is the HyperLogLog's relative standard error.
var distinctRelErr = 1.04 / math.Sqrt(1<<hllBits)

func (d *distinctCounter) add(id int64) {
	if d.regs == nil {
		if d.exact == nil {
			d.exact = map[int64]struct{}{}
		}
		d.exact[id] = struct{}{}
		if len(d.exact) > exactDistinct {
			d.regs = make([]uint8, 1<<hllBits)
			for v := range d.exact {
				d.addHLL(v)
			}
			d.exact = nil
		}
		return
	}
	d.addHLL(id)
}

func (d *distinctCounter) addHLL(id int64) {
	h := hashmix.Finalize(uint64(id))
	i := h >> (64 - hllBits)
	rho := uint8(bits.LeadingZeros64(h<<hllBits|1<<(hllBits-1)) + 1)
	d.regs[i] = max(d.regs[i], rho)
}

// count is the number of distinct ids, and whether it is exact.
func (d *distinctCounter) count() (float64, bool) {
	if d.regs == nil {
		return float64(len(d.exact)), true
	}
	m := float64(len(d.regs))
	var sum float64
	for _, r := range d.regs {
		sum += math.Ldexp(1, -int(r))
	}
	// The raw estimate: the small-range correction is never needed, the
	// registers taking over only past exactDistinct ids, far above 2.5 m.
	return 0.7213 / (1 + 1.079/m) * m * m / sum, false
}
