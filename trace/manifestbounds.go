package trace

import (
	"encoding/json"
	"fmt"
)

// Bounds on what a manifest lists. JSON holds an empty part, source or
// note in a few bytes that decode into tens, so a manifest within
// maxManifestBytes could otherwise decode into gigabytes; its lists are
// counted before it is decoded, and writers and MergeShards refuse to
// write a manifest past them.
const (
	// MaxParts bounds the parts of a bucket: about 130 bytes each, a
	// manifest of MaxParts parts is within maxManifestBytes.
	MaxParts = 1 << 20
	// MaxManifestSources bounds the inputs a bucket was converted from.
	MaxManifestSources = 1 << 16
	// MaxManifestNotes bounds a manifest's notes.
	MaxManifestNotes = 1 << 16
	// maxManifestMapBytes bounds the JSON of the reject reasons and of
	// the generator's settings, each: a few hundred bytes where written.
	maxManifestMapBytes = 1 << 20
)

// anyJSON decodes any JSON value into nothing: a list of them costs no
// memory however long it is.
type anyJSON struct{}

func (*anyJSON) UnmarshalJSON([]byte) error { return nil }

// jsonSize decodes any JSON value into its length in bytes.
type jsonSize int

func (s *jsonSize) UnmarshalJSON(b []byte) error {
	*s = jsonSize(len(b))
	return nil
}

// manifestShape is what checkManifestShape reads of a manifest: how many
// entries its lists hold and how long its maps are.
type manifestShape struct {
	Parts         []anyJSON `json:"parts"`
	Sources       []anyJSON `json:"sources"`
	Notes         []anyJSON `json:"notes"`
	RejectReasons jsonSize  `json:"reject_reasons"`
	Generator     jsonSize  `json:"generator"`
}

// checkManifestShape refuses a manifest's JSON whose lists or maps are
// past the bounds above, before it is decoded.
func checkManifestShape(b []byte) error {
	var s manifestShape
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if err := checkManifestCounts(len(s.Parts), len(s.Sources), len(s.Notes)); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		n    jsonSize
	}{{"reject reasons", s.RejectReasons}, {"generator settings", s.Generator}} {
		if m.n > maxManifestMapBytes {
			return fmt.Errorf("%s of %d bytes, more than the %d a manifest may hold: it was not written by servetrace, or was edited", m.name, m.n, maxManifestMapBytes)
		}
	}
	return nil
}

// checkManifestCounts refuses counts of parts, sources and notes past
// their bounds.
func checkManifestCounts(parts, sources, notes int) error {
	for _, c := range []struct {
		name   string
		n, max int
	}{{"parts", parts, MaxParts}, {"sources", sources, MaxManifestSources}, {"notes", notes, MaxManifestNotes}} {
		if c.n > c.max {
			return fmt.Errorf("%d %s, more than the %d a manifest may list", c.n, c.name, c.max)
		}
	}
	return nil
}
