package datasets

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/servetrace/servetrace/internal/media"
	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// mediaRef is one image or audio part of a message as logged: its data
// (a data URI, a URL, or an audio part's base64) and, for audio, its
// declared format. Only its size, duration and salted hash reach the trace.
type mediaRef struct {
	audio  bool
	data   string
	format string
}

// mediaParts reads a content part that is an image or audio clip: the
// Chat Completions image_url ({url} or a bare string), the Responses API's
// input_image, a bare image, input_audio {data, format}, and a file part
// whose file_data is an image's data URI. ok is false for other parts.
func mediaPart(part map[string]any) (ref mediaRef, ok bool) {
	switch part["type"] {
	case "image_url", "input_image", "image":
		for _, key := range []string{"image_url", "image", "url"} {
			switch v := part[key].(type) {
			case string:
				return mediaRef{data: v}, true
			case map[string]any:
				if u, isStr := v["url"].(string); isStr {
					return mediaRef{data: u}, true
				}
			}
		}
		return mediaRef{}, true // an image whose reference the log dropped
	case "input_audio":
		a, _ := part["input_audio"].(map[string]any)
		data, _ := a["data"].(string)
		format, _ := a["format"].(string)
		return mediaRef{audio: true, data: data, format: strings.ToLower(format)}, true
	case "file":
		f, _ := part["file"].(map[string]any)
		if d, isStr := f["file_data"].(string); isStr && strings.HasPrefix(strings.ToLower(d), "data:image/") {
			return mediaRef{data: d}, true
		}
	}
	return mediaRef{}, false
}

// mediaStats counts what the converter could not measure, for the
// manifest's notes.
type mediaStats struct {
	imagesByURL, imagesUnreadable, audioUnreadable int64
}

// addMedia records a request's images and audio clips: for an image its
// size from the data URI's header (0×0 for a URL or an unreadable one) and
// the salted hash of its bytes (or URL); for audio its WAV duration (0 for
// other codecs) and hash. It returns the tokens the images and clips take
// by media's rules, for a prompt whose usage was not logged.
func addMedia(req *trace.Request, refs []mediaRef, salt anon.Salt, st *mediaStats) (tokens int64) {
	for _, ref := range refs {
		if ref.audio {
			raw, err := audioBytes(ref.data)
			id := salt.ID64("audio", string(raw))
			var ms int64
			if err == nil {
				ms, err = media.WAVDuration(raw)
			} else {
				id = salt.ID64("audio-text", ref.data) // what did not decode still names the clip
			}
			if err != nil || ms > trace.MaxAudioMs {
				ms = 0
				st.audioUnreadable++
			}
			req.AudioCount++
			req.AudioMs = append(req.AudioMs, ms)
			req.AudioIDs = append(req.AudioIDs, id)
			if ms > 0 {
				tokens += int64(media.AudioTokens(ms))
			}
			continue
		}
		w, h, id := imageQuantities(ref.data, salt, st)
		req.ImageCount++
		req.ImageWidthsPx = append(req.ImageWidthsPx, int32(w))
		req.ImageHeightsPx = append(req.ImageHeightsPx, int32(h))
		req.ImageIDs = append(req.ImageIDs, id)
		tokens += int64(media.ImageTokens(w, h))
	}
	if req.ImageCount > 0 {
		req.Features = appendFeature(req.Features, trace.FeatureImage)
	}
	if req.AudioCount > 0 {
		req.Features = appendFeature(req.Features, trace.FeatureAudio)
	}
	return tokens
}

// audioBytes decodes an input_audio part's data: base64 (standard or URL
// alphabet, padded or not), or a data URI.
func audioBytes(data string) ([]byte, error) {
	if media.IsDataURI(data) {
		_, raw, err := media.ParseDataURI(data)
		return raw, err
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(data); err == nil {
			return raw, nil
		}
	}
	return nil, errors.New("not base64")
}

// imageQuantities reads one image reference: a data URI gives its size and
// the hash of its bytes, a URL only the hash of the URL (size 0×0,
// unknown).
func imageQuantities(ref string, salt anon.Salt, st *mediaStats) (w, h int, id int64) {
	if !media.IsDataURI(ref) {
		st.imagesByURL++
		return 0, 0, salt.ID64("image-url", ref)
	}
	_, data, err := media.ParseDataURI(ref)
	if err != nil {
		st.imagesUnreadable++
		return 0, 0, salt.ID64("image-url", ref)
	}
	id = salt.ID64("image", string(data))
	w, h, _, err = media.ImageConfig(data)
	if err != nil || w > trace.MaxImageSidePx || h > trace.MaxImageSidePx {
		st.imagesUnreadable++
		return 0, 0, id
	}
	return w, h, id
}

func (st *mediaStats) add(o mediaStats) {
	st.imagesByURL += o.imagesByURL
	st.imagesUnreadable += o.imagesUnreadable
	st.audioUnreadable += o.audioUnreadable
}

// notes says what a conversion could not measure of its media.
func (st mediaStats) notes(name string) []string {
	var out []string
	if st.imagesByURL > 0 {
		out = append(out, fmt.Sprintf("%s: %d images were logged by URL only: their size is unknown (0), and replay sends them at %dx%d", name, st.imagesByURL, media.DefaultImageWidth, media.DefaultImageHeight))
	}
	if st.imagesUnreadable > 0 {
		out = append(out, fmt.Sprintf("%s: %d images had a data URI or header that did not decode (a log that truncates long strings?): their size is unknown (0)", name, st.imagesUnreadable))
	}
	if st.audioUnreadable > 0 {
		out = append(out, fmt.Sprintf("%s: %d audio clips were not readable WAV: their duration is unknown (0)", name, st.audioUnreadable))
	}
	return out
}
