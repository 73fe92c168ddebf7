package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/webp"
)

// DefaultImageWidth and DefaultImageHeight are the size assumed for an image
// a log names only by URL: its bytes were never seen, so replay sends, and
// counts that it sent, an image of this size instead.
const DefaultImageWidth, DefaultImageHeight = 512, 512

// MaxImageSide and MaxImagePixels bound a synthetic image: 64 megapixels of
// RGBA is 256 MiB before encoding, as much as one request should cost.
const (
	MaxImageSide   = 16384
	MaxImagePixels = 64 << 20
)

// ErrUnknownImage is an image whose header is none of the formats
// ImageConfig reads.
var ErrUnknownImage = errors.New("unrecognised image format: not PNG, JPEG, GIF or WebP")

// imageFormats are the formats ImageConfig reads, found by their magic
// numbers here rather than through image.DecodeConfig so that a format
// another package registers can neither take over nor widen the set.
var imageFormats = []struct {
	name, magic  string // '?' in magic matches any byte
	decodeConfig func(io.Reader) (image.Config, error)
}{
	{"png", "\x89PNG\r\n\x1a\n", png.DecodeConfig},
	{"jpeg", "\xff\xd8", jpeg.DecodeConfig},
	{"gif", "GIF87a", gif.DecodeConfig},
	{"gif", "GIF89a", gif.DecodeConfig},
	{"webp", "RIFF????WEBPVP8", webp.DecodeConfig},
}

func matchMagic(b []byte, magic string) bool {
	if len(b) < len(magic) {
		return false
	}
	for i := 0; i < len(magic); i++ {
		if magic[i] != '?' && magic[i] != b[i] {
			return false
		}
	}
	return true
}

// ImageConfig reads an image's size and format ("png", "jpeg", "gif" or
// "webp") from its header without decoding pixels, so a hostile image costs
// at most one pass over its bytes and no allocation in proportion to its
// claimed size. For a GIF the size is the logical screen's.
func ImageConfig(b []byte) (width, height int, format string, err error) {
	for _, f := range imageFormats {
		if !matchMagic(b, f.magic) {
			continue
		}
		cfg, err := f.decodeConfig(bytes.NewReader(b))
		if err != nil {
			return 0, 0, "", fmt.Errorf("%s header: %w", f.name, err)
		}
		if cfg.Width <= 0 || cfg.Height <= 0 {
			return 0, 0, "", fmt.Errorf("%s header gives a size of %dx%d", f.name, cfg.Width, cfg.Height)
		}
		return cfg.Width, cfg.Height, f.name, nil
	}
	return 0, 0, "", ErrUnknownImage
}

// The constants of Qwen2-VL's image processor: 14-pixel patches merged 2×2
// make one token per 28×28 block, and the resized image is kept between 4
// and 1280 tokens' worth of pixels.
const (
	imageFactor    = 28
	imageMinPixels = 4 * imageFactor * imageFactor
	imageMaxPixels = 1280 * imageFactor * imageFactor
)

// ImageTokens is the number of tokens an image of width×height costs: the
// simulator charges it and the replay client subtracts it from the text
// part. The rule is Qwen2-VL's ("smart_resize" in its image processor): each
// side is rounded to the nearest multiple of 28 (at least 28), the image is
// then rescaled keeping its aspect ratio to within 4 and 1280 blocks of
// 28×28 pixels, and each block is one token. Non-positive sides take the
// defaults, as for an image known only by URL.
func ImageTokens(width, height int) int {
	if width <= 0 {
		width = DefaultImageWidth
	}
	if height <= 0 {
		height = DefaultImageHeight
	}
	// Python's round() rounds halves to even; RoundToEven matches it, so
	// a side of 70 (2.5 blocks) becomes 56 here as it does in the model.
	const f = imageFactor
	h, w := float64(height), float64(width)
	hb := max(f, math.RoundToEven(h/f)*f)
	wb := max(f, math.RoundToEven(w/f)*f)
	switch {
	case hb*wb > imageMaxPixels:
		beta := math.Sqrt(h * w / imageMaxPixels)
		hb = max(f, math.Floor(h/beta/f)*f)
		wb = max(f, math.Floor(w/beta/f)*f)
	case hb*wb < imageMinPixels:
		beta := math.Sqrt(imageMinPixels / (h * w))
		hb = math.Ceil(h*beta/f) * f
		wb = math.Ceil(w*beta/f) * f
	}
	// An extreme aspect ratio leaves one side long after scaling down;
	// the count saturates at MaxInt32 so that it fits any int.
	return int(min((hb/f)*(wb/f), math.MaxInt32))
}

// SynthImage returns a width×height image in format "png" or "jpeg" whose
// bytes depend only on its arguments, so a replay sends the same payload
// every time and different ids give different payloads (a server cannot
// serve one from a cache keyed on content). The picture is a smooth plaid
// whose colours, periods and phases come from id: cheap to encode, never
// black, and unlike any other id's.
func SynthImage(id uint64, width, height int, format string) ([]byte, error) {
	if width < 1 || width > MaxImageSide || height < 1 || height > MaxImageSide {
		return nil, fmt.Errorf("synthetic image of %dx%d: each side must be 1 to %d pixels", width, height, MaxImageSide)
	}
	if width*height > MaxImagePixels {
		return nil, fmt.Errorf("synthetic image of %dx%d: more than %d pixels", width, height, MaxImagePixels)
	}
	var encode func(io.Writer, image.Image) error
	switch format {
	case "png":
		enc := png.Encoder{CompressionLevel: png.BestSpeed}
		encode = enc.Encode
	case "jpeg", "jpg":
		encode = func(w io.Writer, m image.Image) error {
			return jpeg.Encode(w, m, &jpeg.Options{Quality: 75})
		}
	default:
		return nil, fmt.Errorf("synthetic image format %q: use png or jpeg", format)
	}

	s := id
	next := func() uint64 { s = splitmix64(s); return s }
	var colours [3][3]int // each channel 64..255, so never black
	for i := range colours {
		r := next()
		for k := range colours[i] {
			colours[i][k] = 64 + int(r>>(8*k)&0xff)%192
		}
	}
	r := next()
	periodX, periodY := 32+int(r&0xff), 32+int(r>>8&0xff)
	phaseX, phaseY := int(r>>16&0x1ff), int(r>>32&0x1ff)

	// A triangle wave of the column and of the row weight the three
	// colours; integer arithmetic keeps the pixels the same on every
	// platform.
	wx := make([]int, width)
	for x := range wx {
		wx[x] = triangle(x*512/periodX + phaseX)
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		ty := triangle(y*512/periodY + phaseY)
		row := img.Pix[y*img.Stride : y*img.Stride+4*width]
		for x, tx := range wx {
			rest := 510 - tx - ty
			p := row[4*x : 4*x+4 : 4*x+4]
			for k := range 3 {
				p[k] = uint8((colours[0][k]*tx + colours[1][k]*ty + colours[2][k]*rest) / 510)
			}
			p[3] = 0xff
		}
	}
	var buf bytes.Buffer
	if err := encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode synthetic %s: %w", format, err)
	}
	return buf.Bytes(), nil
}

// triangle maps v to 0..255 and back every 512 steps.
func triangle(v int) int {
	m := v & 511
	if m > 255 {
		return 511 - m
	}
	return m
}

// splitmix64 is Steele, Lea and Flood's SplitMix64 step: a bijection on
// uint64 that spreads nearby ids over all bits, so ids 1 and 2 get unrelated
// pictures and tones.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
