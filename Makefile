# servetrace — make targets. `make demo` and `make test` work on a fresh machine
# with Go 1.26 and the Go module proxy; nothing is downloaded at run time.

GO        ?= go
BIN       := bin/servetrace
PKGS      := ./...
STATICCHECK_VERSION := v0.8.2

.PHONY: build test test-unit test-timing test-interop test-fuzz soak demo bench bench-fit bench-fit-agents bench-convert bench-convert-memory bench-replay-memory bench-analyze bench-analyze-peer bench-long-context bench-client bench-vegeta bench-client-vegeta bench-sim lint fmt-check vet clean interop

build:
	$(GO) build -o $(BIN) ./cmd/servetrace

## test: everything CI runs — vet, gofmt check, timing tests without -race, then every test under -race
## (each fuzzer's seeds and saved failures in testdata/fuzz/ included)
test: vet fmt-check test-timing test-unit test-interop

## test-fuzz: every input parser under the fuzzer for FUZZTIME each (seeds in
## testdata/ and testdata/fuzz/; a failure leaves its input there, to commit
## as a regression seed). Not part of `test`: a mutating fuzzer explores at
## random, and CI must give the same verdict on the same commit.
## FUZZTIME is a count of executions, not a duration: with a duration, Go
## 1.26's fuzz coordinator can report "context deadline exceeded" as a
## failure when the time runs out (go.dev/issue/75804, fixed in Go 1.27);
## it did so on a fresh CI checkout, whose cold cache spends most of 3 s on
## baseline coverage. Longer runs: make test-fuzz FUZZTIME=200000x.
FUZZTIME ?= 2000x
FUZZ_TARGETS := ./datasets:FuzzReadAzure ./datasets:FuzzReadMooncake ./datasets:FuzzReadOpenAILog \
	./datasets:FuzzReadBurstGPT ./datasets:FuzzReadShareGPT ./datasets:FuzzReadOTLP ./datasets:FuzzParseMapping ./datasets:FuzzDetect ./replay/chunk:FuzzDecode \
	./trace:FuzzRequestValidate ./synth:FuzzReadModel ./synth:FuzzReadPartial ./analyze/peer:FuzzOpen ./tokenize:FuzzEncodersMatchTiktoken \
	./internal/media:FuzzImageConfig ./internal/media:FuzzWAVDuration ./internal/media:FuzzParseDataURI ./internal/promtext:FuzzScan \
	./replay/probe:FuzzGrade ./replay/probe:FuzzSolve
## Targets whose every execution writes and reads a Parquet file (tens of
## milliseconds) run FUZZ_SLOW_TIME executions.
FUZZ_SLOW_TIME ?= 200x
FUZZ_SLOW_TARGETS := ./trace:FuzzBucketReadChecks
test-fuzz:
	@for t in $(FUZZ_TARGETS) $(FUZZ_SLOW_TARGETS:=:slow); do pkg=$${t%%:*}; rest=$${t#*:}; fn=$${rest%%:*}; n=$(FUZZTIME); \
		case $$rest in *:slow) n=$(FUZZ_SLOW_TIME);; esac; \
		echo "fuzz $$fn ($$n)"; \
		$(GO) test $$pkg -run '^$$' -fuzz "^$$fn\$$" -fuzztime $$n >/tmp/servetrace-fuzz.log 2>&1 || { cat /tmp/servetrace-fuzz.log; exit 1; }; \
	done

## test-interop: other tools read our files (DuckDB through its Go driver, cgo);
## a separate module, so the main one builds without cgo
test-interop:
	cd interop && $(GO) test -count=1 -timeout 5m ./...

test-unit:
	$(GO) test -race -count=1 -timeout 8m $(PKGS)

## test-timing: tests whose figures -race would distort (TestTiming*) and long
## checks (TestLong*: seeded statistical checks and single-goroutine work
## such as fits and tokenizer counts, which -race slows tenfold and has no
## race to find in), without -race. The timing tests run alone, one package
## at a time (-p 1); the long checks run after them, two packages at a
## time, since nothing they assert depends on time.
## The timing tests judge the client by the requests scheduled while a
## separate probe process (one thread pinned per CPU) ran on time: on a
## virtual machine the hypervisor can stop every process for tens of
## milliseconds, which says nothing about the client (replay/hostnoise_test.go).
## Timing tests that fail are rerun once, by name (scripts/test-timing.sh);
## the statistical checks are seeded, so they run once.
LONG := $(GO) test -p 2 -count=1 -timeout 8m -run '^TestLong' $(PKGS)
test-timing:
	@scripts/test-timing.sh $(GO) ./replay/... ./sweep ./tokenize ./cmd/servetrace
	@$(LONG)

## soak: a 10-minute steady replay at 1,000 req/s (SOAK_RATE); RSS and goroutines must
## stay flat and RSS within 300 MB (not part of make test)
SOAK ?= 10m
SOAK_RATE ?= 1000
soak:
	SERVETRACE_SOAK=$(SOAK) SERVETRACE_SOAK_RATE=$(SOAK_RATE) $(GO) test ./replay -run '^TestSoak$$' -count=1 -timeout 30m -v

demo: build
	./$(BIN) demo --out demo-out

## bench: go test benchmarks (ns/op, B/op and the domain figure: rows/s, tokens/s, lag)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s $(PKGS)

## bench-fit: fit a 10-million-row generated trace (latent layer included); rows/s and peak RSS
FIT_ROWS ?= 10000000
bench-fit:
	SERVETRACE_FIT_ROWS=$(FIT_ROWS) $(GO) test ./synth -run '^$$' -bench '^BenchmarkFit$$/' -benchtime 1x -benchmem -timeout 30m

## bench-fit-agents: fit 350,000 requests of agent sessions (chains, fan-outs, joins); rows/s and peak RSS
bench-fit-agents:
	$(GO) test ./synth -run '^$$' -bench '^BenchmarkFitAgentSessions$$' -benchtime 3x -benchmem -timeout 30m

## bench-convert-memory: peak RSS of converting 500k and 5M rows in child processes, and their ratio
bench-convert-memory:
	$(GO) test ./datasets -run '^$$' -bench '^BenchmarkConvertPeakRSS$$' -benchtime 1x -timeout 30m

## bench-convert: servetrace (GOMAXPROCS 1) and DuckDB (threads 1) convert the
## same 2M-row Azure CSV to zstd Parquet in one run; CONVERT_ROWS changes the size
bench-convert:
	cd interop && CONVERT_ROWS=$(or $(CONVERT_ROWS),2000000) $(GO) test -run '^$$' -bench '^BenchmarkConvertVsDuckDB$$' -benchtime 3x -timeout 30m

## bench-replay-memory: peak RSS of replaying 2 s at 1,000 req/s of a 1M- and a
## 10M-request workload in child processes, and their ratio (the schedule streams)
bench-replay-memory:
	$(GO) test ./replay -run '^$$' -bench '^BenchmarkReplayPeakRSS$$' -benchtime 1x -timeout 60m

## bench-analyze: analyze a 100M-row run (ANALYZE_ROWS) streamed, and 1M rows held
## and streamed, in child processes: seconds and peak RSS. The run is written once
## (about 12 GB, 6 minutes) into ANALYZE_DIR and kept for the next time.
bench-analyze:
	ANALYZE_ROWS=$(or $(ANALYZE_ROWS),100000000) ANALYZE_DIR=$(or $(ANALYZE_DIR),$(or $(TMPDIR),/tmp)/servetrace-bench-analyze) \
		$(GO) test ./analyze -run '^$$' -bench '^BenchmarkAnalyzeLongRun$$' -benchtime 1x -timeout 90m

## bench-analyze-peer: analyze a vLLM detailed result of PEER_REQUESTS requests
## (default 3M, about 250 MB, written once into ANALYZE_DIR) in a child process:
## seconds and peak RSS (the file is streamed: memory does not follow its length)
bench-analyze-peer:
	PEER_REQUESTS=$(or $(PEER_REQUESTS),3000000) ANALYZE_DIR=$(or $(ANALYZE_DIR),$(or $(TMPDIR),/tmp)/servetrace-bench-analyze) \
		$(GO) test ./analyze -run '^$$' -bench '^BenchmarkAnalyzePeerPeakRSS$$' -benchtime 1x -timeout 30m

## bench-client: highest open-loop rate with lateness p99 < 1 ms (and < 2 ms), client on core 0, simulator on core 1
bench-client:
	$(GO) test -c -o bin/replay.test ./replay
	cd replay && SERVETRACE_SIM_CPU=1 taskset -c 0 ../bin/replay.test -test.run '^$$' -test.bench OpenLoopMaxRate -test.benchtime 1x -test.v

## bench-vegeta: servetrace and vegeta side by side against an independent
## arrival logger (cmd/arrivallog): arrival error, CPU, lateness, added latency.
## RATES="1000 2000" DUR=10 set the load; vegeta comes from the Go module proxy.
bench-vegeta:
	RATES="$(or $(RATES),1000 2000)" DUR=$(or $(DUR),10) GO=$(GO) scripts/bench-vs-vegeta.sh

## bench-client-vegeta: the same side by side at bench-client's load, 16-token
## streams (ITL 10 ms) from arrivallog at 2,000-4,000 req/s, the client pinned to
## core 0 and the server to core 1, with how busy each core was.
bench-client-vegeta:
	RATES="$(or $(RATES),2000 3000 4000)" DUR=$(or $(DUR),5) CHUNKS=16 ITL=10ms CLIENT_CPU=0 SERVER_CPU=1 GO=$(GO) scripts/bench-vs-vegeta.sh

## bench-long-context: 128k-token prompts at 50 req/s and 32k-token streamed answers
## at 4 req/s to the arrival logger: arrival error, added latency, lateness, CPU
bench-long-context:
	DUR=$(or $(DUR),10) GO=$(GO) scripts/bench-long-context.sh

## bench-sim: 2,000 concurrent streams against the simulator pinned to core 1; engine iteration overrun p99
bench-sim:
	$(GO) test -c -o bin/replay.test ./replay
	cd replay && SERVETRACE_SIM_CPU=1 taskset -c 0 ../bin/replay.test -test.run '^$$' -test.bench Engine2000 -test.benchtime 1x -test.v

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

lint: vet fmt-check
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## interop: read the demo's Parquet with DuckDB (from npm) and check it against servetrace's own figures
DUCKDB_NODE := @duckdb/node-api@1.5.6-r.1
interop: demo
	@mkdir -p .cache/duckdb
	@[ -d .cache/duckdb/node_modules/@duckdb/node-api ] || (cd .cache/duckdb && npm install --no-save --silent $(DUCKDB_NODE))
	cp scripts/duckdb-check.mjs .cache/duckdb/
	./$(BIN) analyze demo-out/run --json > .cache/duckdb/analyze.json
	node .cache/duckdb/duckdb-check.mjs demo-out .cache/duckdb/analyze.json

clean:
	rm -rf bin demo-out .cache
