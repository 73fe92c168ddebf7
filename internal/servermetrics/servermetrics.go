// Package servermetrics is the one table of the server metrics servetrace
// reads from a Prometheus scrape: the engines' (vLLM, SGLang, TGI) queue,
// batch, KV cache and counter names, and NVIDIA dcgm-exporter's GPU fields.
// Replay's idle wait and analyze's time series both classify names here, so
// an engine learnt once is read everywhere.
package servermetrics

import (
	"slices"
	"strings"
)

// Kind is what a metric measures.
type Kind int

// The kinds servetrace reads; Other is every name the table does not hold.
const (
	Other Kind = iota
	// Running counts requests in the engine's running batch (a gauge).
	Running
	// Waiting counts requests queued for the batch (a gauge).
	Waiting
	// KVUsage is the fraction of the KV cache in use, 0 to 1 (a gauge).
	KVUsage
	// Preemptions counts requests the engine preempted (a counter).
	Preemptions
	// PrefixQueries and PrefixHits count prompt tokens looked up in the
	// prefix cache and those found (counters).
	PrefixQueries
	PrefixHits
	// SpecDrafts, SpecDraftTokens and SpecAccepted count speculative
	// decoding's draft steps, tokens proposed and tokens accepted.
	SpecDrafts
	SpecDraftTokens
	SpecAccepted
	// CacheConfig is vLLM's info gauge whose labels state the KV cache
	// settings.
	CacheConfig
	// GPUUtil (%), GPUPower (W), GPUMemUsed (MiB) and GPUEnergy (mJ since
	// the driver loaded, a counter) are one GPU's, per label set.
	GPUUtil
	GPUPower
	GPUMemUsed
	GPUEnergy
	// QueueTime, PrefillTime, DecodeTime and E2ETime are histograms of
	// each finished request's time waiting, in prefill, in decode and end
	// to end, in seconds: their _sum and _count give the mean phase of the
	// requests that finished between two scrapes.
	QueueTime
	PrefillTime
	DecodeTime
	E2ETime
)

// histograms are the kinds whose samples are a histogram's series.
var histograms = []Kind{QueueTime, PrefillTime, DecodeTime, E2ETime}

// Part is which series of a metric a sample is.
type Part int

// A gauge's or counter's Value, or a histogram's _sum, _count or _bucket.
const (
	Value Part = iota
	Sum
	Count
	Bucket
)

// table maps each metric name to its kind. Sources: vLLM
// vllm/v1/metrics/loggers.py (and gpu_cache_usage_perc before 0.8),
// SGLang sglang/srt/metrics/collector.py, TGI's router metrics, and
// dcgm-exporter's etc/default-counters.csv.
var table = map[string]Kind{
	"vllm:num_requests_running": Running,
	"sglang:num_running_reqs":   Running,
	"tgi_batch_current_size":    Running,

	"vllm:num_requests_waiting": Waiting,
	"sglang:num_queue_reqs":     Waiting,
	"tgi_queue_size":            Waiting,

	"vllm:kv_cache_usage_perc":  KVUsage,
	"vllm:gpu_cache_usage_perc": KVUsage,
	"sglang:token_usage":        KVUsage,

	"vllm:num_preemptions_total":      Preemptions,
	"vllm:prefix_cache_queries_total": PrefixQueries,
	"vllm:prefix_cache_hits_total":    PrefixHits,

	"vllm:spec_decode_num_drafts_total":          SpecDrafts,
	"vllm:spec_decode_num_draft_tokens_total":    SpecDraftTokens,
	"vllm:spec_decode_num_accepted_tokens_total": SpecAccepted,

	"vllm:cache_config_info": CacheConfig,

	"DCGM_FI_DEV_GPU_UTIL":                 GPUUtil,
	"DCGM_FI_DEV_POWER_USAGE":              GPUPower,
	"DCGM_FI_DEV_FB_USED":                  GPUMemUsed,
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": GPUEnergy,

	"vllm:request_queue_time_seconds":   QueueTime,
	"vllm:request_prefill_time_seconds": PrefillTime,
	"vllm:request_decode_time_seconds":  DecodeTime,
	"vllm:e2e_request_latency_seconds":  E2ETime,
}

// KindOf says what the named metric measures, Other for names not in the
// table.
func KindOf(name string) Kind {
	if k := table[name]; !slices.Contains(histograms, k) {
		return k
	}
	return Other // a histogram's samples carry a suffix: see Classify
}

// Classify says what a sample measures and which of its metric's series
// it is: a histogram's samples are named by the histogram with _sum,
// _count or _bucket after it.
func Classify(name string) (Kind, Part) {
	if k := KindOf(name); k != Other {
		return k, Value
	}
	for _, s := range []struct {
		suffix string
		part   Part
	}{{"_sum", Sum}, {"_count", Count}, {"_bucket", Bucket}} {
		if base, ok := strings.CutSuffix(name, s.suffix); ok {
			if k := table[base]; slices.Contains(histograms, k) {
				return k, s.part
			}
		}
	}
	return Other, Value
}

// Names lists the metric names of the given kinds, sorted, for messages
// that say what a server did not report.
func Names(kinds ...Kind) string {
	var out []string
	for name, k := range table {
		if slices.Contains(kinds, k) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
