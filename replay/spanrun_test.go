package replay

import (
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/opterr"
)

// TestCollectSpansStaysOnLoopback: a span receiver takes spans from any
// host that reaches it, so an address other than loopback is refused,
// naming AllowRemoteSpans, unless that is set; no host means loopback.
func TestCollectSpansStaysOnLoopback(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"0.0.0.0:4317", false, false},
		{"[::]:4317", false, false},
		{"192.0.2.7:4317", false, false},
		{"collector.example:4317", false, false},
		{"0.0.0.0:4317", true, true},
		{":4317", false, true},
		{"127.0.0.1:4317", false, true},
		{"localhost:4317", false, true},
		{"[::1]:4317", false, true},
	} {
		opts := DefaultOptions()
		opts.Target = "http://127.0.0.1:1"
		opts.CollectSpans, opts.AllowRemoteSpans = c.addr, c.remote
		err := opts.validate()
		if c.ok != (err == nil) {
			t.Errorf("%s (remote allowed %v): %v, want ok %v", c.addr, c.remote, err, c.ok)
			continue
		}
		if err != nil {
			if oe, ok := opterr.As(err); !ok || oe.Field != "CollectSpans" || !strings.Contains(oe.Reason, "AllowRemoteSpans") {
				t.Errorf("%s: %v, want an option error on CollectSpans naming AllowRemoteSpans", c.addr, err)
			}
		}
	}
}
