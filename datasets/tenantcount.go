package datasets

import "github.com/servetrace/servetrace/trace"

// maxTenantCounts bounds the tenants whose requests the first pass of
// MinTenantRequests counts at once: tenant ids are keyed hashes of user
// ids, and a log of millions of users would hold one count each.
const maxTenantCounts = 1 << 20

// tenantCounter counts requests per tenant (the first pass of
// --min-tenant-requests), in at most max counts, by Misra and Gries'
// frequent-items summary: a tenant met with no room takes none, and
// every count held is lowered by one, those reaching zero dropped. A
// count is never above its tenant's requests, so no tenant with fewer
// than the minimum is ever kept apart, which is the promise; and it is
// at most requests/(max+1) below them, so only a tenant within that of
// the minimum may be folded though it had enough. It writes nothing.
type tenantCounter struct {
	max    int
	counts map[string]int
	// requests counted; lowered counts how often every count was lowered.
	requests, lowered int
}

func newTenantCounter(max int) *tenantCounter {
	return &tenantCounter{max: max, counts: map[string]int{}}
}

func (c *tenantCounter) Write(r trace.Request) error {
	c.requests++
	switch {
	case c.counts[r.Tenant] > 0 || len(c.counts) < c.max:
		c.counts[r.Tenant]++
	default: // no room: every count less one, paid for by the requests counted
		c.lowered++
		for t, n := range c.counts {
			if n == 1 {
				delete(c.counts, t)
			} else {
				c.counts[t] = n - 1
			}
		}
	}
	return nil
}

func (c *tenantCounter) Reject(trace.Reject) error { return nil }

// count is a lower bound on tenant's requests.
func (c *tenantCounter) count(tenant string) int { return c.counts[tenant] }

// lossy reports whether counts were lowered, so some may be below the
// truth, by at most requests/(max+1).
func (c *tenantCounter) lossy() bool { return c.lowered > 0 }
