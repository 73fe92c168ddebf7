package servermetrics

import (
	"os"
	"testing"

	"github.com/servetrace/servetrace/internal/promtext"
)

// TestEngineExposition sums each kind over an exposition in the engines'
// shape (the promtext reader's fixture) and checks every kind the table
// holds is there, against sums worked out by hand from the file.
func TestEngineExposition(t *testing.T) {
	b, err := os.ReadFile("../promtext/testdata/engines.prom")
	if err != nil {
		t.Fatal(err)
	}
	sums, seen := map[Kind]float64{}, map[Kind]int{}
	counts := map[Kind]float64{}
	promtext.Scan(string(b), func(s promtext.Sample) {
		k, part := Classify(s.Name)
		switch part {
		case Value, Sum:
			sums[k] += s.Value
		case Count:
			counts[k] += s.Value
		}
		seen[k]++
	}, nil)
	for _, k := range histograms {
		if counts[k] != 100 {
			t.Errorf("histogram kind %d counts %v requests, want 100", k, counts[k])
		}
	}
	want := map[Kind]float64{
		Running:         7 + 5 + 4 + 2, // two vLLM engines, SGLang, TGI
		Waiting:         2 + 0 + 6 + 1,
		KVUsage:         0.4375 + 0.25,
		Preemptions:     3,
		PrefixQueries:   81920,
		PrefixHits:      40960,
		SpecDrafts:      400,
		SpecDraftTokens: 1200,
		SpecAccepted:    900,
		CacheConfig:     1,
		GPUUtil:         87 + 91,
		GPUPower:        612.5 + 598.25,
		GPUMemUsed:      72011,
		GPUEnergy:       9123456789,
		QueueTime:       12.5, // the histograms' _sum
		PrefillTime:     6.25,
		DecodeTime:      250,
		E2ETime:         270,
	}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("kind %d sums to %v, want %v", k, sums[k], v)
		}
	}
	for _, k := range table {
		if seen[k] == 0 {
			t.Errorf("kind %d is in the table but not in the fixture", k)
		}
	}
	if seen[Other] == 0 {
		t.Error("no name fell to Other")
	}
}

// TestNames lists a kind's names sorted, for messages.
func TestNames(t *testing.T) {
	got := Names(Running, Waiting)
	want := "sglang:num_queue_reqs, sglang:num_running_reqs, tgi_batch_current_size, tgi_queue_size, vllm:num_requests_running, vllm:num_requests_waiting"
	if got != want {
		t.Errorf("Names = %q\nwant %q", got, want)
	}
}
