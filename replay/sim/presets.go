package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
)

// A Preset is a model/GPU pair's engine constants.
//
// The constants are first-order estimates from public spec sheets, not
// measurements: the iteration base is the time to stream the weights once
// from HBM (every decode step reads them all); the prefill cost per token is
// 2 × parameters FLOPs at about half the GPU's dense bf16 peak; the KV read
// per token is its KV size (2 × layers × KV heads × head dim × 2 bytes) over
// HBM bandwidth; the KV cache is the HBM left after the weights, at 90%
// utilisation, in 16-token blocks; a GPU draws its idle power (about a tenth
// of TDP) at rest and its TDP when busy (see GPUModel). Measure your own server and fit real
// constants with `servetrace sim calibrate`.
//
// The request features' costs are as rough, for the model as if it were a
// vision-language model with a Qwen2-VL-sized vision encoder (675M
// parameters) and rank-16 LoRA adapters on every projection: an image
// token is 4 patches of 14×14 pixels, 2 × 675M × 4 ≈ 5.4 GFLOP, at about
// half the bf16 peak; an adapter's load is its weights from host memory
// plus building it (vLLM's own step dominates), and each adapter in a
// batch adds its weights' read and its shrink/expand kernels per layer;
// compiling a JSON schema takes xgrammar tens of milliseconds and a token
// mask tens of microseconds of CPU; logprobs are a log-softmax and top-k
// over the vocabulary plus detokenizing; verifying a draft token costs
// what prefilling a token does.
type Preset struct {
	Name        string
	Description string
	Engine      EngineOptions
	MaxModelLen int
	// GPU is the hardware the DCGM exporter describes (power from the
	// board's idle draw to its TDP; memory in MiB).
	GPU GPUModel
}

// presets are the built-in model/GPU pairs.
var presets = []Preset{
	{
		// 8B params, bf16: 16 GB of weights at 3.35 TB/s ≈ 4.8 ms; 16 GFLOP/token at
		// ~400 TFLOP/s ≈ 40 µs; KV 32 layers × 8 heads × 128 × 2 × 2 B = 128 KiB/token
		// at 3.35 TB/s ≈ 40 ns; (80 GB × 0.9 − 16 GB) / 128 KiB ≈ 430k tokens.
		Name: "llama-3.1-8b-h100", Description: "Llama 3.1 8B, bf16, one H100 SXM 80 GB",
		// Features: 5.4 GFLOP per image token at ~400 TFLOP/s ≈ 15 µs (a 1280-token
		// image ≈ 19 ms); an adapter is 42M params = 84 MB: loaded in ≈ 20 ms, read
		// per iteration in 25 µs plus ~75 µs of kernels over 32 layers.
		Engine: EngineOptions{Cost: CostModel{IterBase: 4800 * time.Microsecond, PerPrefillToken: 40 * time.Microsecond,
			PerDecodeSeq: 20 * time.Microsecond, PerKVToken: 40 * time.Nanosecond,
			EncoderPerImageToken: 15 * time.Microsecond, LoRALoadCost: 20 * time.Millisecond, LoRAPerAdapter: 100 * time.Microsecond,
			GrammarCompileCost: 20 * time.Millisecond, GrammarMaskPerToken: 30 * time.Microsecond, LogprobsPerToken: 10 * time.Microsecond,
			PerDraftToken: 40 * time.Microsecond},
			MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, KVBlocks: 26880, BlockSize: 16, MaxWaiting: 4096, PrefixCaching: true},
		GPU:         GPUModel{Name: "NVIDIA H100 80GB HBM3", Count: 1, IdleW: 70, MaxW: 700, MemoryMiB: 81559, WeightsMiB: 15320, KVBlockMiB: 2},
		MaxModelLen: 131072,
	},
	{
		// 7.6B params, bf16: 15.2 GB at 2.0 TB/s ≈ 7.6 ms; 15.2 GFLOP/token at
		// ~156 TFLOP/s ≈ 97 µs; KV 28 layers × 4 heads × 128 × 2 × 2 B = 56 KiB/token
		// at 2 TB/s ≈ 28 ns; (80 GB × 0.9 − 15.2 GB) / 56 KiB ≈ 1.0M tokens.
		Name: "qwen2.5-7b-a100", Description: "Qwen2.5 7B, bf16, one A100 SXM 80 GB",
		// Features: 5.4 GFLOP per image token at ~156 TFLOP/s ≈ 35 µs (38 µs with
		// attention); an adapter is ~80 MB, read in 40 µs plus ~75 µs of kernels.
		Engine: EngineOptions{Cost: CostModel{IterBase: 7600 * time.Microsecond, PerPrefillToken: 97 * time.Microsecond,
			PerDecodeSeq: 30 * time.Microsecond, PerKVToken: 28 * time.Nanosecond,
			EncoderPerImageToken: 38 * time.Microsecond, LoRALoadCost: 20 * time.Millisecond, LoRAPerAdapter: 120 * time.Microsecond,
			GrammarCompileCost: 20 * time.Millisecond, GrammarMaskPerToken: 30 * time.Microsecond, LogprobsPerToken: 10 * time.Microsecond,
			PerDraftToken: 97 * time.Microsecond},
			MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, KVBlocks: 63360, BlockSize: 16, MaxWaiting: 4096, PrefixCaching: true},
		GPU:         GPUModel{Name: "NVIDIA A100-SXM4-80GB", Count: 1, IdleW: 55, MaxW: 400, MemoryMiB: 81920, WeightsMiB: 14496, KVBlockMiB: 0.875},
		MaxModelLen: 32768,
	},
	{
		// 70B params, bf16, tensor parallel 4: 35 GB per GPU at 3.35 TB/s ≈ 10.4 ms
		// (+~1 ms all-reduce); 140 GFLOP/token over 4 × ~400 TFLOP/s ≈ 88 µs; KV
		// 80 layers × 8 heads × 128 × 2 × 2 B = 320 KiB/token split 4 ways at
		// 3.35 TB/s ≈ 25 ns; 4 × (72 − 35) GB / 320 KiB ≈ 450k tokens.
		Name: "llama-3.1-70b-h100x4", Description: "Llama 3.1 70B, bf16, four H100 SXM 80 GB (TP 4)",
		// Features: the encoder as on one H100; an adapter is ~207M params = 414 MB,
		// loaded in ≈ 60 ms, a quarter read per GPU in 31 µs plus ~190 µs of kernels
		// over 80 layers.
		Engine: EngineOptions{Cost: CostModel{IterBase: 11400 * time.Microsecond, PerPrefillToken: 88 * time.Microsecond,
			PerDecodeSeq: 40 * time.Microsecond, PerKVToken: 25 * time.Nanosecond,
			EncoderPerImageToken: 15 * time.Microsecond, LoRALoadCost: 60 * time.Millisecond, LoRAPerAdapter: 220 * time.Microsecond,
			GrammarCompileCost: 20 * time.Millisecond, GrammarMaskPerToken: 30 * time.Microsecond, LogprobsPerToken: 10 * time.Microsecond,
			PerDraftToken: 88 * time.Microsecond},
			MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, KVBlocks: 28200, BlockSize: 16, MaxWaiting: 4096, PrefixCaching: true},
		GPU:         GPUModel{Name: "NVIDIA H100 80GB HBM3", Count: 4, IdleW: 70, MaxW: 700, MemoryMiB: 81559, WeightsMiB: 33379, KVBlockMiB: 5},
		MaxModelLen: 131072,
	},
	{
		// No compute cost at all: the engine produces tokens as fast as it can.
		// For measuring the client, not a server.
		Name: "zero", Description: "no compute cost: for benchmarking clients",
		Engine:      EngineOptions{MaxNumBatchedTokens: 1 << 20, MaxNumSeqs: 1 << 16, KVBlocks: 1 << 22, BlockSize: 16, MaxWaiting: 1 << 20, PrefixCaching: true},
		MaxModelLen: 1 << 20,
	},
}

// DefaultPreset names the preset DefaultOptions uses.
const DefaultPreset = "llama-3.1-8b-h100"

// Presets returns the built-in presets.
func Presets() []Preset { return slices.Clone(presets) }

// LookupPreset returns the named preset.
func LookupPreset(name string) (Preset, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	return Preset{}, opterr.New("Preset", name, "unknown; use one of: %s", strings.Join(names, ", "))
}
