package synth

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Categorical is a distribution over a few string values, optionally per
// hour of the day (UTC) where the trace shows the mix moving with the hour.
type Categorical struct {
	Values []string  `json:"values"`
	Shares []float64 `json:"shares"`
	// ByHour, when present, holds 24 share vectors over Values.
	ByHour [][]float64 `json:"by_hour,omitempty"`
	// Other is the share folded from values beyond the most frequent
	// maxCategories (sampled as the empty value).
	Other float64 `json:"other,omitempty"`
}

// maxCategories bounds the values kept per attribute.
const maxCategories = 32

// catCounter counts values overall and by hour.
type catCounter struct {
	counts map[string]*valueCounts
	hours  map[int64]bool // distinct clock hours seen: 48 make two days
	// last, lastCounts and lastHour let a row that repeats the row above
	// (most do: one model, one API) skip the maps.
	last       string
	lastCounts *valueCounts
	lastHour   int64
}

// valueCounts is one value's count, overall and by hour of the day.
type valueCounts struct {
	total  int64
	byHour [24]int64
}

func newCatCounter() *catCounter {
	return &catCounter{counts: map[string]*valueCounts{}, hours: map[int64]bool{}, lastHour: math.MinInt64}
}

// countsOf returns v's counts, made on first sight.
func (c *catCounter) countsOf(v string) *valueCounts {
	if c.lastCounts != nil && v == c.last {
		return c.lastCounts
	}
	p := c.counts[v]
	if p == nil {
		p = &valueCounts{}
		c.counts[v] = p
	}
	c.last, c.lastCounts = v, p
	return p
}

// add counts v at hour of day hour, in the clock hour hourIndex (hours
// since the epoch).
func (c *catCounter) add(v string, hour int, hourIndex int64) {
	p := c.countsOf(v)
	p.total++
	p.byHour[hour]++
	if hourIndex != c.lastHour {
		c.hours[hourIndex] = true
		c.lastHour = hourIndex
	}
}

// merge adds o's counts to c's.
func (c *catCounter) merge(o *catCounter) {
	for v, n := range o.counts {
		p := c.countsOf(v)
		p.total += n.total
		for h, k := range n.byHour {
			p.byHour[h] += k
		}
	}
	for h := range o.hours {
		c.hours[h] = true
	}
}

// hourCount is how often v was counted at hour h of the day.
func (c *catCounter) hourCount(h int, v string) int64 {
	if p := c.counts[v]; p != nil {
		return p.byHour[h]
	}
	return 0
}

// categorical builds the distribution; per-hour shares are kept when the
// trace covers at least two days and a chi-square test of value against
// hour rejects independence at the 0.1% level.
func (c *catCounter) categorical() Categorical {
	type vc struct {
		v string
		n int64
	}
	var vals []vc
	var n int64
	for v, k := range c.counts {
		vals = append(vals, vc{v, k.total})
		n += k.total
	}
	if n == 0 {
		return Categorical{}
	}
	slices.SortFunc(vals, func(a, b vc) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.v, b.v)) })
	var cat Categorical
	for i, x := range vals {
		if i >= maxCategories {
			cat.Other += float64(x.n) / float64(n)
			continue
		}
		cat.Values = append(cat.Values, x.v)
		cat.Shares = append(cat.Shares, float64(x.n)/float64(n))
	}
	if len(cat.Values) < 2 || len(c.hours) < 48 {
		return cat
	}
	// Chi-square test of independence of value and hour.
	chi, df := 0.0, 0
	hourN := make([]float64, 24)
	for _, k := range c.counts {
		for h, n := range k.byHour {
			hourN[h] += float64(n)
		}
	}
	for h := range 24 {
		if hourN[h] == 0 {
			continue
		}
		df++
		for i, v := range cat.Values {
			exp := hourN[h] * cat.Shares[i]
			if exp > 0 {
				d := float64(c.hourCount(h, v)) - exp
				chi += d * d / exp
			}
		}
	}
	df = (df - 1) * (len(cat.Values) - 1)
	if df <= 0 || (distuv.ChiSquared{K: float64(df)}).Survival(chi) > 0.001 {
		return cat
	}
	cat.ByHour = make([][]float64, 24)
	for h := range 24 {
		shares := make([]float64, len(cat.Values))
		for i, v := range cat.Values {
			if hourN[h] > 0 {
				shares[i] = float64(c.hourCount(h, v)) / hourN[h]
			} else {
				shares[i] = cat.Shares[i]
			}
		}
		cat.ByHour[h] = shares
	}
	return cat
}

// pick draws a value; hour selects the per-hour shares when present.
func (c *Categorical) pick(rng *rand.Rand, hour int) string {
	if len(c.Values) == 0 {
		return ""
	}
	shares := c.Shares
	if len(c.ByHour) == 24 && hour >= 0 {
		shares = c.ByHour[hour]
	}
	total := c.Other
	for _, s := range shares {
		total += s
	}
	u := rng.Float64() * total
	for i, s := range shares {
		if u < s {
			return c.Values[i]
		}
		u -= s
	}
	return ""
}

// Mix holds the categorical request attributes.
type Mix struct {
	Model       Categorical `json:"model"`
	Adapter     Categorical `json:"adapter"`
	Tenant      Categorical `json:"tenant"`
	API         Categorical `json:"api"`
	Stream      Categorical `json:"stream"`
	Temperature Categorical `json:"temperature"`
	TopP        Categorical `json:"top_p"`
	// Features holds feature sets, sorted and joined by "+".
	Features Categorical `json:"features"`
}

type mixCounter struct {
	model, adapter, tenant, api, stream, temperature, topP, features *catCounter
	temperatureKey, topPKey                                          floatKeyer
}

// floatKeyer is floatKey that formats a value only when it differs from
// the one before: most rows repeat the row above's sampling.
type floatKeyer struct {
	last uint64 // the bits, so -0 and 0 stay apart
	key  string
	ok   bool
}

func (k *floatKeyer) of(p *float64) string {
	if p == nil {
		return ""
	}
	if bits := math.Float64bits(*p); !k.ok || bits != k.last {
		k.last, k.key, k.ok = bits, floatKey(p), true
	}
	return k.key
}

func newMixCounter() *mixCounter {
	return &mixCounter{model: newCatCounter(), adapter: newCatCounter(), tenant: newCatCounter(), api: newCatCounter(),
		stream: newCatCounter(), temperature: newCatCounter(), topP: newCatCounter(), features: newCatCounter()}
}

func floatKey(p *float64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatFloat(*p, 'g', 4, 64)
}

// add counts one request's attributes, at arrival time tsUs (µs since the
// epoch, UTC).
func (m *mixCounter) add(model, adapter, tenant, api string, stream bool, temp, topP *float64, features []string, tsUs int64) {
	hourIndex := tsUs / (int64(time.Hour) / int64(time.Microsecond))
	hour := int(hourIndex % 24)
	m.model.add(model, hour, hourIndex)
	m.adapter.add(adapter, hour, hourIndex)
	m.tenant.add(tenant, hour, hourIndex)
	m.api.add(api, hour, hourIndex)
	m.stream.add(strconv.FormatBool(stream), hour, hourIndex)
	m.temperature.add(m.temperatureKey.of(temp), hour, hourIndex)
	m.topP.add(m.topPKey.of(topP), hour, hourIndex)
	key := ""
	switch len(features) {
	case 0:
	case 1:
		key = features[0]
	default:
		f := slices.Clone(features)
		slices.Sort(f)
		key = strings.Join(f, "+")
	}
	m.features.add(key, hour, hourIndex)
}

// merge adds o's counts to m's.
func (m *mixCounter) merge(o *mixCounter) {
	m.model.merge(o.model)
	m.adapter.merge(o.adapter)
	m.tenant.merge(o.tenant)
	m.api.merge(o.api)
	m.stream.merge(o.stream)
	m.temperature.merge(o.temperature)
	m.topP.merge(o.topP)
	m.features.merge(o.features)
}

func (m *mixCounter) mix() Mix {
	return Mix{Model: m.model.categorical(), Adapter: m.adapter.categorical(), Tenant: m.tenant.categorical(), API: m.api.categorical(),
		Stream: m.stream.categorical(), Temperature: m.temperature.categorical(), TopP: m.topP.categorical(), Features: m.features.categorical()}
}

// parseFloatKey turns a sampled float key back into a pointer (nil for "").
func parseFloatKey(s string) *float64 {
	if s == "" {
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return nil
	}
	return &v
}
