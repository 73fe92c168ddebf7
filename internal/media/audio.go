package media

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrUnknownAudio is audio that is not a RIFF/WAVE file, the one format
// whose duration can be read from a header alone (MP3, Ogg and the rest
// need their frames walked).
var ErrUnknownAudio = errors.New("unrecognised audio format: only RIFF/WAVE is read")

// MaxAudioMillis bounds a synthetic clip to an hour: 115 MB of 16 kHz
// 16-bit PCM, as much as one request should cost.
const MaxAudioMillis = 3_600_000

// synthRate is the sample rate of synthetic audio, the 16 kHz that
// Whisper-style encoders resample to anyway.
const synthRate = 16000

// wavFrameFormats are the WAVE format tags whose block align is one sample frame,
// so that the frame count is the data size over it: PCM, IEEE float, A-law,
// µ-law and WAVE_FORMAT_EXTENSIBLE.
var wavFrameFormats = map[uint16]bool{1: true, 3: true, 6: true, 7: true, 0xfffe: true}

// WAVDuration reads a RIFF/WAVE header and returns the duration of its
// audio in milliseconds, rounded to the nearest. Chunks are walked by their
// declared sizes and never past the end of b. A data chunk whose size is
// 0xFFFFFFFF (a streaming writer that could not seek back) or larger than
// what follows counts the bytes that are there, which is what a server
// decoding it would get. Anything but RIFF/WAVE is ErrUnknownAudio.
func WAVDuration(b []byte) (ms int64, err error) {
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return 0, ErrUnknownAudio
	}
	var (
		haveFmt, haveData  bool
		format, channels   uint16
		blockAlign, bits   uint16
		rate, byteRate     uint32
		dataSize, fmtStart int64
	)
	for off := int64(12); off+8 <= int64(len(b)) && !(haveFmt && haveData); {
		id := string(b[off : off+4])
		size := int64(binary.LittleEndian.Uint32(b[off+4 : off+8]))
		body := off + 8
		left := int64(len(b)) - body
		switch id {
		case "fmt ":
			if haveFmt {
				break
			}
			if size < 16 {
				return 0, fmt.Errorf("wav fmt chunk at byte %d is %d bytes, want at least 16", off, size)
			}
			if left < 16 {
				return 0, fmt.Errorf("wav fmt chunk at byte %d is cut short", off)
			}
			f := b[body : body+16]
			format = binary.LittleEndian.Uint16(f[0:])
			channels = binary.LittleEndian.Uint16(f[2:])
			rate = binary.LittleEndian.Uint32(f[4:])
			byteRate = binary.LittleEndian.Uint32(f[8:])
			blockAlign = binary.LittleEndian.Uint16(f[12:])
			bits = binary.LittleEndian.Uint16(f[14:])
			haveFmt, fmtStart = true, off
		case "data":
			if haveData {
				break
			}
			if size == 0xffffffff || size > left {
				size = left
			}
			haveData, dataSize = true, size
		}
		off = body + size + size&1 // chunks are padded to an even size
	}
	if !haveFmt {
		return 0, errors.New("wav has no fmt chunk")
	}
	if !haveData {
		return 0, errors.New("wav has no data chunk")
	}
	if channels == 0 || rate == 0 {
		return 0, fmt.Errorf("wav fmt chunk at byte %d gives %d channels at %d Hz", fmtStart, channels, rate)
	}
	if wavFrameFormats[format] {
		align := int64(blockAlign)
		if align == 0 {
			align = int64(channels) * int64((bits+7)/8)
		}
		if align == 0 {
			return 0, fmt.Errorf("wav fmt chunk at byte %d gives neither a block align nor a sample size", fmtStart)
		}
		frames := dataSize / align // at most 2³², so ×1000 cannot overflow
		return (frames*1000 + int64(rate)/2) / int64(rate), nil
	}
	// A compressed format (ADPCM and the like): its byte rate is the
	// only measure the header gives.
	if byteRate == 0 {
		return 0, fmt.Errorf("wav fmt chunk at byte %d has format tag %#x and no byte rate", fmtStart, format)
	}
	return (dataSize*1000 + int64(byteRate)/2) / int64(byteRate), nil
}

// SynthWAV returns ms milliseconds of 16 kHz mono 16-bit PCM WAV (exactly
// ms×16 samples) whose bytes depend only on its arguments, so a replay sends
// the same payload every time and different ids differ. The signal is a
// quiet tone, about −20 dBFS, between 200 and 1000 Hz with its frequency and
// starting phase from id, computed in integers so that every platform gives
// the same samples.
func SynthWAV(id uint64, ms int64) ([]byte, error) {
	if ms < 1 || ms > MaxAudioMillis {
		return nil, fmt.Errorf("synthetic audio of %d ms: must be 1 to %d ms", ms, MaxAudioMillis)
	}
	n := ms * synthRate / 1000
	dataLen := uint32(n * 2)
	b := make([]byte, 44+int(dataLen))
	le := binary.LittleEndian
	copy(b[0:], "RIFF")
	le.PutUint32(b[4:], 36+dataLen)
	copy(b[8:], "WAVEfmt ")
	le.PutUint32(b[16:], 16)
	le.PutUint16(b[20:], 1) // PCM
	le.PutUint16(b[22:], 1) // mono
	le.PutUint32(b[24:], synthRate)
	le.PutUint32(b[28:], synthRate*2) // byte rate
	le.PutUint16(b[32:], 2)           // block align
	le.PutUint16(b[34:], 16)          // bits per sample
	copy(b[36:], "data")
	le.PutUint32(b[40:], dataLen)

	h := splitmix64(id)
	freq := 200 + h%801
	step := uint32(freq << 32 / synthRate) // phase increment, 2³² per cycle
	phase := uint32(splitmix64(h))
	const amp = 3277 // 0.1 of full scale
	for i := range n {
		s := int16(sineQ15(phase) * amp / 32768)
		le.PutUint16(b[44+2*i:], uint16(s))
		phase += step
	}
	return b, nil
}

// sineQ15 approximates 32768·sin(2π·phase/2³²) by the parabola
// 4x(1−|x|), x the phase as a fraction of a half turn: within 6% of full scale of
// a sine and integer-only, which is all a test tone needs.
func sineQ15(phase uint32) int64 {
	x := int64(int32(phase)) >> 16 // −32768..32767, a half turn each way
	ax := x
	if ax < 0 {
		ax = -ax
	}
	return 4 * x * (32768 - ax) / 32768
}

// AudioTokens is the number of tokens ms milliseconds of audio cost: one
// per 40 ms, rounded up. That is Qwen2-Audio's rate: its Whisper encoder
// turns 100 mel frames a second into 50 positions by a stride-2
// convolution, and a stride-2 pooling halves them to 25 tokens a second.
// Non-positive durations cost nothing.
func AudioTokens(ms int64) int {
	if ms <= 0 {
		return 0
	}
	t := ms / 40
	if ms%40 != 0 {
		t++
	}
	return int(min(t, math.MaxInt32))
}
