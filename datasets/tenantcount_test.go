package datasets

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
	"github.com/servetrace/servetrace/trace"
)

// TestLongTenantCountsAreBounded (issue 46, round 4, item 2): counting
// the requests of 4M distinct tenants for --min-tenant-requests holds at
// most its room for counts (2^16 here; 2^20 in a conversion, some 140 MB),
// within 256 MiB. Before, one count a tenant: 4M entries of 32-byte ids,
// some 320 MB.
func TestLongTenantCountsAreBounded(t *testing.T) {
	memcap.Run(t, 256<<20, func(t *testing.T) {
		const room = 1 << 16
		c := newTenantCounter(room)
		var id [32]byte
		for i := range 4_000_000 {
			b := strconv.AppendInt(id[:0], int64(i), 16)
			c.Write(trace.Request{Identity: trace.Identity{Tenant: string(append(b, make([]byte, 32-len(b))...))}})
		}
		if len(c.counts) > room || c.requests != 4_000_000 || !c.lossy() {
			t.Errorf("%d counts held for %d requests (lossy %v); want at most %d", len(c.counts), c.requests, c.lossy(), room)
		}
	})
}

// TestTenantCountsErrOnFolding: with room for 2 counts, the counts kept
// are never above the truth (so a rare tenant is always folded), and at
// most requests/(room+1) below it. Hand-computed: a a b c (c finds no
// room: every count less one, a 1, b gone), c (room: c 1), a (a 2).
func TestTenantCountsErrOnFolding(t *testing.T) {
	c := newTenantCounter(2)
	for _, tenant := range []string{"a", "a", "b", "c", "c", "a"} {
		c.Write(trace.Request{Identity: trace.Identity{Tenant: tenant}})
	}
	if c.count("a") != 2 || c.count("b") != 0 || c.count("c") != 1 || !c.lossy() {
		t.Errorf("counts a %d, b %d, c %d (lossy %v); want 2, 0, 1, lossy", c.count("a"), c.count("b"), c.count("c"), c.lossy())
	}
	// Random streams: counts within [truth - requests/(room+1), truth].
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		room := 1 + rng.IntN(20)
		c := newTenantCounter(room)
		truth := map[string]int{}
		n := 200 + rng.IntN(2000)
		for range n {
			tenant := strconv.Itoa(int(rng.ExpFloat64() * 10))
			truth[tenant]++
			c.Write(trace.Request{Identity: trace.Identity{Tenant: tenant}})
		}
		slack := n / (room + 1)
		for tenant, k := range truth {
			if got := c.count(tenant); got > k || got < k-slack {
				t.Fatalf("trial %d (room %d, %d requests): tenant %s counted %d of %d; want within [%d, %d]", trial, room, n, tenant, got, k, k-slack, k)
			}
		}
		if len(c.counts) > room {
			t.Fatalf("trial %d: %d counts held, room for %d", trial, len(c.counts), room)
		}
	}
}
