package replay

import (
	"container/list"
	"encoding/base64"
	"fmt"
	"sync"

	"github.com/servetrace/servetrace/internal/media"
)

// mediaKey names one synthetic image or clip: the same key always gives
// byte-identical bytes, so a server's multimodal cache sees the trace's
// reuse.
type mediaKey struct {
	id     uint64
	w, h   int   // image size; 0 for audio
	ms     int64 // clip duration; 0 for images
	format string
}

// path is the key as the image server's URL path.
func (k mediaKey) path() string {
	return fmt.Sprintf("/images/%016x-%dx%d.%s", k.id, k.w, k.h, k.format)
}

// mediaCache holds synthetic images and clips, base64-encoded, bounded by
// their total size with least-recently-used eviction: building a large PNG
// takes milliseconds, and a trace repeats its images.
type mediaCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // of *mediaEntry, most recent at the front
	by    map[mediaKey]*list.Element
}

type mediaEntry struct {
	key    mediaKey
	raw    []byte
	base64 string
}

// mediaCacheBytes bounds the cache: a few hundred large images.
const mediaCacheBytes = 256 << 20

func newMediaCache(max int64) *mediaCache {
	return &mediaCache{max: max, order: list.New(), by: map[mediaKey]*list.Element{}}
}

// get returns the key's bytes and their base64, synthesizing them on a
// miss.
func (c *mediaCache) get(k mediaKey) (raw []byte, b64 string, err error) {
	c.mu.Lock()
	if e, ok := c.by[k]; ok {
		c.order.MoveToFront(e)
		ent := e.Value.(*mediaEntry)
		c.mu.Unlock()
		return ent.raw, ent.base64, nil
	}
	c.mu.Unlock()
	if k.format == "wav" {
		raw, err = media.SynthWAV(k.id, k.ms)
	} else {
		raw, err = media.SynthImage(k.id, k.w, k.h, k.format)
	}
	if err != nil {
		return nil, "", err
	}
	ent := &mediaEntry{key: k, raw: raw, base64: base64.StdEncoding.EncodeToString(raw)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.by[k]; ok { // built twice at once: keep the first
		return e.Value.(*mediaEntry).raw, e.Value.(*mediaEntry).base64, nil
	}
	c.by[k] = c.order.PushFront(ent)
	c.size += int64(len(raw) + len(ent.base64))
	for c.size > c.max && c.order.Len() > 1 {
		old := c.order.Back()
		oe := old.Value.(*mediaEntry)
		c.order.Remove(old)
		delete(c.by, oe.key)
		c.size -= int64(len(oe.raw) + len(oe.base64))
	}
	return ent.raw, ent.base64, nil
}
