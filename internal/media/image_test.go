package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"testing"
)

// encodeStd encodes a blank w×h image with the standard library's encoder
// for format, an independent writer of the headers ImageConfig reads.
func encodeStd(t testing.TB, format string, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch format {
	case "png":
		err = png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h)))
	case "jpeg":
		err = jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h)), nil)
	case "gif":
		err = gif.Encode(&buf, image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.Black, color.White}), nil)
	default:
		t.Fatalf("no encoder for %q", format)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// riffWebP wraps one chunk in a RIFF/WEBP container as the WebP container
// specification lays it out: "RIFF", the file size less 8, "WEBP", then the
// chunk's FourCC, size and payload padded to an even length.
func riffWebP(fourCC string, payload []byte) []byte {
	chunk := append([]byte(fourCC), binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))...)
	chunk = append(chunk, payload...)
	if len(payload)%2 == 1 {
		chunk = append(chunk, 0)
	}
	b := append([]byte("RIFF"), binary.LittleEndian.AppendUint32(nil, uint32(4+len(chunk)))...)
	b = append(b, "WEBP"...)
	return append(b, chunk...)
}

// webpLossless is the VP8L header of the lossless bitstream specification:
// the signature 0x2f, then, least significant bit first, 14 bits of
// width−1, 14 of height−1, an alpha hint bit and a 3-bit version of 0.
func webpLossless(w, h int) []byte {
	bits := uint32(w-1) | uint32(h-1)<<14
	return riffWebP("VP8L", append([]byte{0x2f}, binary.LittleEndian.AppendUint32(nil, bits)...))
}

// webpExtended is a VP8X chunk of the extended format: a flags byte, three
// reserved bytes, then 24-bit little-endian canvas width−1 and height−1.
func webpExtended(w, h int) []byte {
	p := []byte{0, 0, 0, 0,
		byte(w - 1), byte((w - 1) >> 8), byte((w - 1) >> 16),
		byte(h - 1), byte((h - 1) >> 8), byte((h - 1) >> 16)}
	return riffWebP("VP8X", p)
}

func TestImageConfig(t *testing.T) {
	cases := []struct {
		name   string
		b      []byte
		w, h   int
		format string
	}{
		{"png", encodeStd(t, "png", 640, 480), 640, 480, "png"},
		{"png 1x1", encodeStd(t, "png", 1, 1), 1, 1, "png"},
		{"jpeg", encodeStd(t, "jpeg", 123, 457), 123, 457, "jpeg"},
		{"gif", encodeStd(t, "gif", 300, 20), 300, 20, "gif"},
		{"webp lossless", webpLossless(300, 200), 300, 200, "webp"},
		{"webp lossless max", webpLossless(16384, 1), 16384, 1, "webp"},
		{"webp extended", webpExtended(4000, 3000), 4000, 3000, "webp"},
		// 24 bits of width−1 all set: 2²⁴, the largest WebP canvas.
		{"webp extended max", webpExtended(1<<24, 1), 1 << 24, 1, "webp"},
	}
	for _, c := range cases {
		w, h, f, err := ImageConfig(c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if w != c.w || h != c.h || f != c.format {
			t.Errorf("%s: got %dx%d %s, want %dx%d %s", c.name, w, h, f, c.w, c.h, c.format)
		}
	}
}

func TestImageConfigRejects(t *testing.T) {
	pngb := encodeStd(t, "png", 64, 64)
	jpegb := encodeStd(t, "jpeg", 64, 64)
	gifb := encodeStd(t, "gif", 64, 64)
	lossless := webpLossless(64, 64)
	cases := []struct {
		name    string
		b       []byte
		unknown bool // ErrUnknownImage rather than a header error
	}{
		{"empty", nil, true},
		{"garbage", []byte("definitely not an image"), true},
		{"bmp", append([]byte("BM"), make([]byte, 60)...), true},
		{"riff but wave", append([]byte("RIFF\x04\x00\x00\x00WAVE"), make([]byte, 16)...), true},
		{"png signature only", pngb[:8], false},
		{"png cut in IHDR", pngb[:20], false},
		{"png bad IHDR crc", append(append(append([]byte{}, pngb[:29]...), 0, 0, 0, 0), pngb[33:]...), false},
		{"jpeg SOI only", jpegb[:2], false},
		{"jpeg cut", jpegb[:40], false},
		{"gif header only", gifb[:6], false},
		{"webp cut in VP8L", lossless[:len(lossless)-4], false},
		{"webp no chunk", []byte("RIFF\x04\x00\x00\x00WEBPVP8 "), false},
	}
	for _, c := range cases {
		w, h, _, err := ImageConfig(c.b)
		if err == nil {
			t.Errorf("%s: got %dx%d, want an error", c.name, w, h)
			continue
		}
		if got := errors.Is(err, ErrUnknownImage); got != c.unknown {
			t.Errorf("%s: errors.Is(%v, ErrUnknownImage) = %v, want %v", c.name, err, got, c.unknown)
		}
	}
}

func TestImageTokensHandComputed(t *testing.T) {
	// Each side is rounded to the nearest multiple of 28 (at least 28). If
	// the product exceeds 1280·784 = 1,003,520 pixels, beta = √(w·h/1,003,520)
	// and each side becomes max(28, ⌊side/beta/28⌋·28); if it is under
	// 4·784 = 3136, beta = √(3136/(w·h)) and each side ⌈side·beta/28⌉·28.
	// Tokens are (w'/28)·(h'/28).
	cases := []struct {
		w, h, want int
	}{
		// 28→28; 784 < 3136: beta = √(3136/784) = 2, ⌈28·2/28⌉ = 2 → 2·2.
		{28, 28, 4},
		// 512/28 = 18.29 → 18 (504); 504² = 254,016 in range → 18·18.
		{512, 512, 324},
		// 1024/28 = 36.57 → 37 (1036); 1036² = 1,073,296 > 1,003,520:
		// beta = √(1,048,576/1,003,520) = 1.0222, 1024/1.0222 = 1001.8,
		// /28 = 35.78 → 35 → 35·35.
		{1024, 1024, 1225},
		// 4000/28 = 142.86 → 143, 3000/28 = 107.14 → 107; 4004·2996 =
		// 11,995,984 > max: beta = √(12,000,000/1,003,520) = 3.4580;
		// 4000/3.4580/28 = 41.31 → 41, 3000/3.4580/28 = 30.98 → 30 → 41·30.
		{4000, 3000, 1230},
		{3000, 4000, 1230},
		// 1280/28 = 45.71 → 46, 720/28 = 25.71 → 26; 1288·728 = 937,664
		// in range → 46·26.
		{1280, 720, 1196},
		// 1920/28 = 68.57 → 69, 1080/28 = 38.57 → 39; 1932·1092 =
		// 2,109,744 > max: beta = √(2,073,600/1,003,520) = 1.4375;
		// 1920/1.4375/28 = 47.70 → 47, 1080/1.4375/28 = 26.83 → 26 → 47·26.
		{1920, 1080, 1222},
		// 100/28 = 3.57 → 4 (112); 112² = 12,544 in range → 4·4.
		{100, 100, 16},
		// 2000/28 = 71.43 → 71, 50/28 = 1.79 → 2; 1988·56 = 111,328 in
		// range → 71·2.
		{2000, 50, 142},
		// 20 and 30 round to 28; 784 < 3136: beta = √(3136/600) = 2.2862;
		// 20·2.2862/28 = 1.63 → 2, 30·2.2862/28 = 2.45 → 3 → 2·3.
		{20, 30, 6},
		// 70/28 = 2.5 rounds half to even, as Python's round() does, to 2
		// (56); 56² = 3136 is not under the minimum → 2·2 (not 3·3).
		{70, 70, 4},
		// 1→28; 784 < 3136: beta = √3136 = 56, ⌈56/28⌉ = 2 → 2·2.
		{1, 1, 4},
		// Non-positive sides take the 512×512 default.
		{0, 0, 324},
		{-5, 512, 324},
	}
	for _, c := range cases {
		if got := ImageTokens(c.w, c.h); got != c.want {
			t.Errorf("ImageTokens(%d, %d) = %d, want %d", c.w, c.h, got, c.want)
		}
	}
}

func TestImageTokensExtremeSizesStayPositive(t *testing.T) {
	// No size a header can claim makes the count overflow or vanish.
	for _, c := range [][2]int{{1 << 24, 1}, {1, 1 << 24}, {1 << 31, 1 << 31}, {1 << 62, 1}, {1<<63 - 1, 1<<63 - 1}} {
		if got := ImageTokens(c[0], c[1]); got <= 0 {
			t.Errorf("ImageTokens(%d, %d) = %d, want positive", c[0], c[1], got)
		}
	}
}

func TestSynthImageRoundTrip(t *testing.T) {
	cases := []struct {
		w, h   int
		format string
		decode string // the name image.Decode reports
	}{
		{1, 1, "png", "png"},
		{17, 33, "png", "png"},
		{640, 480, "png", "png"},
		{1, 1, "jpeg", "jpeg"},
		{33, 17, "jpeg", "jpeg"},
		{512, 512, "jpg", "jpeg"},
	}
	for _, c := range cases {
		a, err := SynthImage(1, c.w, c.h, c.format)
		if err != nil {
			t.Fatalf("%dx%d %s: %v", c.w, c.h, c.format, err)
		}
		m, name, err := image.Decode(bytes.NewReader(a))
		if err != nil {
			t.Fatalf("%dx%d %s: decode: %v", c.w, c.h, c.format, err)
		}
		if b := m.Bounds(); b.Dx() != c.w || b.Dy() != c.h || name != c.decode {
			t.Errorf("%dx%d %s: decoded %dx%d %s", c.w, c.h, c.format, b.Dx(), b.Dy(), name)
		}
		if bright := maxChannel(m); bright < 0x4000 {
			t.Errorf("%dx%d %s: brightest channel %#x, want a visible picture", c.w, c.h, c.format, bright)
		}
		again, err := SynthImage(1, c.w, c.h, c.format)
		if err != nil || !bytes.Equal(a, again) {
			t.Errorf("%dx%d %s: same id gave different bytes (%v)", c.w, c.h, c.format, err)
		}
		other, err := SynthImage(2, c.w, c.h, c.format)
		if err != nil || bytes.Equal(a, other) {
			t.Errorf("%dx%d %s: ids 1 and 2 gave the same bytes (%v)", c.w, c.h, c.format, err)
		}
	}
}

func maxChannel(m image.Image) uint32 {
	var hi uint32
	b := m.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := m.At(x, y).RGBA()
			hi = max(hi, r, g, bl)
		}
	}
	return hi
}

func TestSynthImageDiffersAcrossManyIDs(t *testing.T) {
	seen := map[string]uint64{}
	for id := range uint64(200) {
		b, err := SynthImage(id, 8, 8, "png")
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[string(b)]; ok {
			t.Fatalf("ids %d and %d gave the same image", prev, id)
		}
		seen[string(b)] = id
	}
}

func TestSynthImageRejects(t *testing.T) {
	cases := []struct {
		w, h   int
		format string
	}{
		{0, 10, "png"},
		{10, -1, "png"},
		{MaxImageSide + 1, 1, "png"},
		{MaxImageSide, MaxImageSide, "png"}, // 256 megapixels
		{MaxImageSide, MaxImagePixels/MaxImageSide + 1, "jpeg"},
		{10, 10, "gif"},
		{10, 10, "PNG"},
	}
	for _, c := range cases {
		if _, err := SynthImage(1, c.w, c.h, c.format); err == nil {
			t.Errorf("SynthImage(1, %d, %d, %q): no error", c.w, c.h, c.format)
		}
	}
}

func FuzzImageConfig(f *testing.F) {
	f.Add(encodeStd(f, "png", 3, 2))
	f.Add(encodeStd(f, "jpeg", 3, 2))
	f.Add(encodeStd(f, "gif", 3, 2))
	f.Add(webpLossless(3, 2))
	f.Add(webpExtended(3, 2))
	f.Add([]byte("RIFF\x00\x00\x00\x00WEBPVP8 \x0a\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, h, format, err := ImageConfig(b)
		if err == nil && (w <= 0 || h <= 0 || format == "") {
			t.Errorf("got %dx%d %q and no error", w, h, format)
		}
		_ = ImageTokens(w, h)
	})
}
