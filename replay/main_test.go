package replay

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servetrace/servetrace/replay/pacing"
	"github.com/servetrace/servetrace/replay/sim"
)

// simChildEnv makes the test binary serve the simulator instead of running
// tests, so benchmarks can load a server in a separate process (pinned to
// its own core with taskset).
const simChildEnv = "SERVETRACE_SIM_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(simChildEnv) != "" {
		serveSimChild()
		return
	}
	if os.Getenv(noiseProbeEnv) != "" {
		runNoiseProbe()
		return
	}
	if spec := os.Getenv(shardChildEnv); spec != "" {
		runShardChild(spec)
		return
	}
	if spec := os.Getenv(replayChildEnv); spec != "" {
		runReplayChild(spec)
		return
	}
	os.Exit(m.Run())
}

// serveSimChild serves a simulator on a free loopback port, prints its
// URL, and exits when standard input closes. SERVETRACE_SIM_PRESET picks the
// preset (default zero) and SERVETRACE_SIM_MAX_SEQS the running limit.
func serveSimChild() {
	o := sim.DefaultOptions()
	name := os.Getenv("SERVETRACE_SIM_PRESET")
	if name == "" {
		name = "zero"
	}
	p, err := sim.LookupPreset(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	o.Engine, o.Preset, o.MaxModelLen = p.Engine, p.Name, p.MaxModelLen
	if n, err := strconv.Atoi(os.Getenv("SERVETRACE_SIM_MAX_SEQS")); err == nil {
		o.Engine.MaxNumSeqs = n
	}
	sim.LatencyGC(1 << 30) // as servetrace sim does by default
	s, err := sim.New(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if path := os.Getenv("SERVETRACE_SIM_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	fmt.Println(rs.URL)
	bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	rs.Close()
}

// shardChildEnv makes the test binary run one replay shard:
// "TARGET|WORKLOAD|RUN_DIR|I|N|START_AT|RUN_ID|RATE".
const shardChildEnv = "SERVETRACE_SHARD_CHILD"

func runShardChild(spec string) {
	f := strings.Split(spec, "|")
	i, _ := strconv.Atoi(f[3])
	n, _ := strconv.Atoi(f[4])
	start, err := time.Parse(time.RFC3339Nano, f[5])
	rate, _ := strconv.ParseFloat(f[7], 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pacing.TuneProcess()()
	o := DefaultOptions()
	o.Target, o.Rate, o.Arrival, o.RunID = f[0], rate, ArrivalConstant, f[6]
	o.Shard, o.ShardCount, o.StartAt = int32(i), int32(n), start
	if _, err := Run(context.Background(), f[1], f[2], o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
