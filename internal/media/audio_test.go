package media

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// riffChunk is a RIFF chunk: FourCC, little-endian size, payload, and a pad
// byte after an odd payload.
func riffChunk(id string, size uint32, payload []byte) []byte {
	b := append([]byte(id), binary.LittleEndian.AppendUint32(nil, size)...)
	b = append(b, payload...)
	if len(payload)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

// fmtChunk is the 16-byte WAVE fmt chunk: format tag, channels, sample
// rate, byte rate, block align, bits per sample.
func fmtChunk(format, channels uint16, rate, byteRate uint32, align, bits uint16) []byte {
	le := binary.LittleEndian
	p := le.AppendUint16(nil, format)
	p = le.AppendUint16(p, channels)
	p = le.AppendUint32(p, rate)
	p = le.AppendUint32(p, byteRate)
	p = le.AppendUint16(p, align)
	p = le.AppendUint16(p, bits)
	return riffChunk("fmt ", uint32(len(p)), p)
}

func dataChunk(n int) []byte { return riffChunk("data", uint32(n), make([]byte, n)) }

func wave(chunks ...[]byte) []byte {
	body := bytes.Join(chunks, nil)
	b := append([]byte("RIFF"), binary.LittleEndian.AppendUint32(nil, uint32(4+len(body)))...)
	return append(append(b, "WAVE"...), body...)
}

func TestWAVDurationHandBuilt(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want int64
	}{
		// 44.1 kHz stereo 16-bit: 4 bytes a frame, 1.5 s = 66,150 frames
		// = 264,600 bytes.
		{"cd stereo 1.5 s", wave(fmtChunk(1, 2, 44100, 176400, 4, 16), dataChunk(264600)), 1500},
		// An odd LIST chunk (5 bytes and a pad) first; 8 kHz mono 8-bit,
		// 2000 bytes = 250 ms.
		{"odd chunk first", wave(riffChunk("LIST", 5, []byte("INFOx")), fmtChunk(1, 1, 8000, 8000, 1, 8), dataChunk(2000)), 250},
		// A streaming writer's data size of 0xFFFFFFFF: the 32,000 bytes
		// there at 16 kHz mono 16-bit are 1 s.
		{"streaming size", wave(fmtChunk(1, 1, 16000, 32000, 2, 16), riffChunk("data", 0xffffffff, make([]byte, 32000))), 1000},
		// A size claiming 64,000 bytes with 16,000 there: 500 ms.
		{"cut short", wave(fmtChunk(1, 1, 16000, 32000, 2, 16), riffChunk("data", 64000, make([]byte, 16000))), 500},
		// 48 kHz stereo float32: 8 bytes a frame, 192,000 bytes = 0.5 s.
		{"float", wave(fmtChunk(3, 2, 48000, 384000, 8, 32), dataChunk(192000)), 500},
		// No block align: 1 channel × 2 bytes; 3200 bytes at 16 kHz = 100 ms.
		{"no block align", wave(fmtChunk(1, 1, 16000, 0, 0, 16), dataChunk(3200)), 100},
		// IMA ADPCM is measured by its byte rate: 8110 / 4055 = 2 s.
		{"adpcm", wave(fmtChunk(0x11, 1, 8000, 4055, 256, 4), dataChunk(8110)), 2000},
		// 3 frames at 2 kHz are 1.5 ms, rounded to 2.
		{"rounds half up", wave(fmtChunk(1, 1, 2000, 4000, 2, 16), dataChunk(6)), 2},
		// 1 frame at 16 kHz is 0.0625 ms, rounded to 0.
		{"one sample", wave(fmtChunk(1, 1, 16000, 32000, 2, 16), dataChunk(2)), 0},
		// data before fmt is legal RIFF, if unusual.
		{"data first", wave(dataChunk(32000), fmtChunk(1, 1, 16000, 32000, 2, 16)), 1000},
	}
	for _, c := range cases {
		got, err := WAVDuration(c.b)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: %d ms, want %d", c.name, got, c.want)
		}
	}
}

func TestWAVDurationRejects(t *testing.T) {
	good := fmtChunk(1, 1, 16000, 32000, 2, 16)
	cases := []struct {
		name    string
		b       []byte
		unknown bool // ErrUnknownAudio rather than a header error
	}{
		{"empty", nil, true},
		{"mp3", []byte("ID3\x03\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x00"), true},
		{"ogg", []byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00"), true},
		{"avi", append([]byte("RIFF\x04\x00\x00\x00AVI "), dataChunk(4)...), true},
		{"riff only", []byte("RIFF\x04\x00\x00\x00"), true},
		{"no fmt", wave(dataChunk(100)), false},
		{"no data", wave(good), false},
		{"nothing", wave(), false},
		{"fmt too small", wave(riffChunk("fmt ", 8, make([]byte, 8)), dataChunk(100)), false},
		{"fmt cut short", wave(riffChunk("fmt ", 16, make([]byte, 10))), false},
		{"no channels", wave(fmtChunk(1, 0, 16000, 32000, 2, 16), dataChunk(100)), false},
		{"no rate", wave(fmtChunk(1, 1, 0, 32000, 2, 16), dataChunk(100)), false},
		{"no frame size", wave(fmtChunk(1, 1, 16000, 32000, 0, 0), dataChunk(100)), false},
		{"compressed no byte rate", wave(fmtChunk(0x55, 1, 16000, 0, 1, 0), dataChunk(100)), false},
	}
	for _, c := range cases {
		ms, err := WAVDuration(c.b)
		if err == nil {
			t.Errorf("%s: got %d ms, want an error", c.name, ms)
			continue
		}
		if got := errors.Is(err, ErrUnknownAudio); got != c.unknown {
			t.Errorf("%s: errors.Is(%v, ErrUnknownAudio) = %v, want %v", c.name, err, got, c.unknown)
		}
	}
}

func TestSynthWAV(t *testing.T) {
	le := binary.LittleEndian
	for _, ms := range []int64{1, 40, 1500, 60000} {
		b, err := SynthWAV(7, ms)
		if err != nil {
			t.Fatalf("%d ms: %v", ms, err)
		}
		// Read the canonical 44-byte header field by field.
		if len(b) != 44+int(ms)*32 || string(b[0:4]) != "RIFF" || le.Uint32(b[4:]) != uint32(len(b)-8) ||
			string(b[8:16]) != "WAVEfmt " || le.Uint32(b[16:]) != 16 || le.Uint16(b[20:]) != 1 ||
			le.Uint16(b[22:]) != 1 || le.Uint32(b[24:]) != 16000 || le.Uint32(b[28:]) != 32000 ||
			le.Uint16(b[32:]) != 2 || le.Uint16(b[34:]) != 16 || string(b[36:40]) != "data" ||
			le.Uint32(b[40:]) != uint32(ms)*32 {
			t.Errorf("%d ms: header % x (length %d) is not 16 kHz mono 16-bit PCM of %d samples", ms, b[:min(len(b), 44)], len(b), ms*16)
		}
		if got, err := WAVDuration(b); err != nil || got != ms {
			t.Errorf("%d ms: WAVDuration = %d, %v", ms, got, err)
		}
		if ms >= 40 { // a full cycle at the lowest tone, 200 Hz, is 5 ms
			var peak int
			for i := 44; i < len(b); i += 2 {
				peak = max(peak, abs(int(int16(le.Uint16(b[i:])))))
			}
			if peak < 3000 || peak > 3277 {
				t.Errorf("%d ms: peak %d, want a tone near 3277 (−20 dBFS)", ms, peak)
			}
		}
		again, err := SynthWAV(7, ms)
		if err != nil || !bytes.Equal(b, again) {
			t.Errorf("%d ms: same id gave different bytes (%v)", ms, err)
		}
		other, err := SynthWAV(8, ms)
		if err != nil || bytes.Equal(b, other) {
			t.Errorf("%d ms: ids 7 and 8 gave the same bytes (%v)", ms, err)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestSynthWAVRejects(t *testing.T) {
	for _, ms := range []int64{0, -1, MaxAudioMillis + 1} {
		if _, err := SynthWAV(1, ms); err == nil {
			t.Errorf("SynthWAV(1, %d): no error", ms)
		}
	}
}

func TestAudioTokens(t *testing.T) {
	cases := []struct {
		ms   int64
		want int
	}{
		{1000, 25}, // 25 a second
		{40, 1},
		{41, 2}, // rounded up
		{1, 1},
		{30000, 750}, // Whisper's 30 s window
		{0, 0},
		{-40, 0},
	}
	for _, c := range cases {
		if got := AudioTokens(c.ms); got != c.want {
			t.Errorf("AudioTokens(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
}

func FuzzWAVDuration(f *testing.F) {
	f.Add(wave(fmtChunk(1, 2, 44100, 176400, 4, 16), dataChunk(400)))
	f.Add(wave(riffChunk("LIST", 5, []byte("INFOx")), fmtChunk(1, 1, 8000, 8000, 1, 8), riffChunk("data", 0xffffffff, nil)))
	f.Add(wave(fmtChunk(0x11, 1, 8000, 4055, 256, 4), dataChunk(10)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ms, err := WAVDuration(b); err == nil && ms < 0 {
			t.Errorf("negative duration %d", ms)
		}
	})
}
