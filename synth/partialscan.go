package synth

import (
	"fmt"
	"io"
	"strings"
)

// Limits on what the statistics of a partial may hold, checked by
// partialScanner as the decoder reads them, before any of it is decoded:
// a hostile partial (a gzip stream inflating to gigabytes of valid-looking
// JSON) is refused within a few hundred MiB. A partial servetrace wrote
// is within them unless its slice holds millions of distinct prefix
// groups or mix values: fit it in more shards.
var (
	// maxPartialStatsCost bounds the memory the statistics may decode to,
	// as partialScanner estimates it (partialCost), the arrival times
	// aside (8 bytes each, bounded by the header's first turns).
	maxPartialStatsCost int64 = 512 << 20
	// maxPartialValueBytes bounds the JSON text of one statistic the
	// decoder reads whole (a reservoir, a histogram, a column of prefix
	// groups, one attribute's counts), which it holds while decoding it.
	maxPartialValueBytes int64 = 64 << 20
)

const (
	// maxPartialString bounds one string: the longest a partial holds are
	// agent-graph shapes, of at most 1,024 requests.
	maxPartialString = 1 << 20
	// maxPartialScalar bounds one number or literal.
	maxPartialScalar = 64
	// maxPartialDepth bounds nesting; a partial nests six deep.
	maxPartialDepth = 32
)

// partialStreamed are the containers of the statistics line that
// decodePartial reads a member or element at a time (by their path from
// the line's object, array elements "#"); every other container is read
// whole, within maxPartialValueBytes.
var partialStreamed = map[string]bool{
	"arrivals_s": true, "classes": true, "classes/#": true,
	"prefix": true, "prefix/groups": true, "sessions": true, "mix": true, "contract": true,
}

// partialCost is what one member (in an object) or element (in an array)
// of a container with this key costs decoded, where it costs more than
// partialMemberCost or partialElemCost: a catCounter's values (their counts
// by hour), an image size class (a catCounter of its own), a prefix group
// (a map entry and its statistics), a seen image id and a popularity's
// keys (decoded, then copied into a map).
var partialCost = map[string]int64{
	"total": 320, "image_size": 1024, "first_block": 112, "image_ids": 48, "schemas": 128, "adapters": 128,
}

const (
	partialMemberCost    = 64 // a map entry
	partialElemCost      = 8  // a slice element
	partialContainerCost = 16 // a slice header, or an array's own
)

// partialScanner passes the decompressed stream of a partial to its JSON
// decoder without the whitespace between tokens, checking as it goes the
// limits above and the lengths of strings, numbers and nesting: the
// decoder buffers a value whole before decoding it, so these are checked
// on the bytes it buffers, not on what it builds. It does not check the
// grammar; the decoder does.
type partialScanner struct {
	r   io.Reader
	buf []byte
	pos int
	// rerr is the underlying reader's error, returned once buf is drained;
	// err is a limit passed, returned from then on.
	rerr, err error

	inString, escape bool
	strLen, scalar   int
	key              []byte // the string being read, if it may be a key we track
	expectKey        bool
	lastKey          string
	stack            []scanFrame
	// written counts the bytes passed on; wholeAt is where the container
	// being read whole began (-1: none).
	written, wholeAt int64
	wholePath        string
	cost             int64
}

// scanFrame is an open container.
type scanFrame struct {
	object   bool
	path     string // from the line's object: "prefix/groups", "classes/#"
	streamed bool
	elemCost int64 // what each member or element costs
	free     bool  // arrival times: counted by the header, not in cost
}

func newPartialScanner(r io.Reader) *partialScanner {
	return &partialScanner{r: r, buf: make([]byte, 0, 64<<10), wholeAt: -1}
}

func (s *partialScanner) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := 0
	for n == 0 && len(p) > 0 {
		if s.pos == len(s.buf) {
			if s.rerr != nil {
				return 0, s.rerr
			}
			m, err := s.r.Read(s.buf[:cap(s.buf)])
			s.buf, s.pos, s.rerr = s.buf[:m], 0, err
			continue
		}
		for s.pos < len(s.buf) && n < len(p) {
			c := s.buf[s.pos]
			s.pos++
			if !s.inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				s.scalar = 0 // whitespace between tokens, the commonest filler: dropped here
				continue
			}
			keep, err := s.step(c)
			if err != nil {
				s.err = err
				return n, err
			}
			if keep {
				p[n] = c
				n++
			}
		}
	}
	return n, nil
}

// step takes one byte other than whitespace between tokens; keep is
// false for none (every byte it takes is kept).
func (s *partialScanner) step(c byte) (keep bool, err error) {
	s.written++
	if s.wholeAt >= 0 && s.written-s.wholeAt > maxPartialValueBytes {
		return false, &errPartialLimit{fmt.Sprintf("a statistic (%s) of more than %d bytes", pathText(s.wholePath), maxPartialValueBytes)}
	}
	if s.inString {
		if s.strLen++; s.strLen > maxPartialString {
			return false, &errPartialLimit{fmt.Sprintf("a string of more than %d bytes", maxPartialString)}
		}
		switch {
		case s.escape:
			s.escape = false
		case c == '\\':
			s.escape = true
		case c == '"':
			s.inString = false
			return true, s.endString()
		}
		if s.key != nil && len(s.key) < 64 {
			s.key = append(s.key, c)
		}
		return true, nil
	}
	if c != '"' && c != '{' && c != '[' && c != '}' && c != ']' && c != ':' && c != ',' {
		if s.scalar == 0 {
			if err := s.beginValue(); err != nil {
				return false, err
			}
		}
		if s.scalar++; s.scalar > maxPartialScalar {
			return false, &errPartialLimit{fmt.Sprintf("a number or literal of more than %d bytes", maxPartialScalar)}
		}
		return true, nil
	}
	s.scalar = 0
	switch c {
	case '"':
		s.inString, s.strLen = true, 0
		if top := s.top(); top != nil && top.object && s.expectKey {
			s.key = s.key[:0]
			if s.key == nil {
				s.key = make([]byte, 0, 64)
			}
			return true, nil
		}
		s.key = nil
		return true, s.beginValue()
	case '{', '[':
		if err := s.beginValue(); err != nil {
			return false, err
		}
		return true, s.open(c == '{')
	case '}', ']':
		return true, s.close()
	case ':':
		s.expectKey = false
	case ',':
		if top := s.top(); top != nil && top.object {
			s.expectKey = true
		}
	}
	return true, nil
}

func (s *partialScanner) top() *scanFrame {
	if len(s.stack) == 0 {
		return nil
	}
	return &s.stack[len(s.stack)-1]
}

// beginValue counts a value's place in its container.
func (s *partialScanner) beginValue() error {
	top := s.top()
	if top == nil || top.free {
		return nil
	}
	return s.spend(top.elemCost)
}

// endString counts a string's bytes (a key's too: map keys are kept) and
// remembers a key.
func (s *partialScanner) endString() error {
	if s.key != nil {
		s.lastKey = string(s.key)
		s.key = nil
	}
	if top := s.top(); top != nil && top.free {
		return nil
	}
	return s.spend(2 * int64(s.strLen))
}

func (s *partialScanner) spend(n int64) error {
	if s.cost += n; s.cost > maxPartialStatsCost {
		return &errPartialLimit{fmt.Sprintf("statistics that decode to more than %d bytes (the arrival times aside)", maxPartialStatsCost)}
	}
	return nil
}

// open pushes a container: streamed where decodePartial reads its members
// one at a time, else read whole from here, within maxPartialValueBytes.
func (s *partialScanner) open(object bool) error {
	if len(s.stack) >= maxPartialDepth {
		return &errPartialLimit{fmt.Sprintf("JSON nested deeper than %d", maxPartialDepth)}
	}
	if err := s.spend(partialContainerCost); err != nil {
		return err
	}
	f := scanFrame{object: object, elemCost: partialElemCost}
	if object {
		f.elemCost = partialMemberCost
	}
	name := ""
	if parent := s.top(); parent != nil {
		name = "#"
		if parent.object {
			name = s.lastKey
		}
		f.path = name
		if parent.path != "" {
			f.path = parent.path + "/" + name
		}
		f.streamed = parent.streamed && partialStreamed[f.path]
		f.free = parent.free || f.path == "arrivals_s"
		if !f.streamed && parent.streamed {
			s.wholeAt, s.wholePath = s.written-1, f.path
		}
	} else {
		f.streamed = true // a line's object: read key by key
	}
	if c, ok := partialCost[name]; ok {
		f.elemCost = c
	}
	s.stack = append(s.stack, f)
	s.expectKey = object
	return nil
}

// close pops a container.
func (s *partialScanner) close() error {
	if len(s.stack) == 0 {
		return nil // the decoder reports the stray delimiter
	}
	f := s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	if !f.streamed && (len(s.stack) == 0 || s.top().streamed) {
		s.wholeAt = -1
	}
	s.expectKey = false
	return nil
}

// pathText names a path for an error.
func pathText(p string) string { return strings.ReplaceAll(p, "/", ".") }
