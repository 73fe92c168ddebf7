#!/usr/bin/env bash
# Long context, scaled to a 2-core machine: servetrace replays to
# cmd/arrivallog (an independent loopback server that logs each arrival
# and first byte) (1) 128k-token prompts with 4-token answers at 50 req/s,
# the request side of issue 15's 128k/32k at 50 req/s, and (2) 1k-token
# prompts with 32k-token streamed answers at 4 req/s, the reading side: 50
# req/s of 32k-event streams would be 1.6M events/s, beyond two cores for
# any client when the server flushes each event. For each: the server-side
# arrival error, the latency the client adds to TTFT, its lateness and CPU.
# DUR (s) sets the length.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
DUR=${DUR:-10}
out=.cache/bench-long-context
rm -rf "$out" && mkdir -p "$out" bin
$GO build -o bin/servetrace ./cmd/servetrace
$GO build -o bin/arrivallog ./cmd/arrivallog
port=18125
url="http://127.0.0.1:$port"

# case NAME RATE PROMPT_TOKENS OUTPUT_TOKENS CHUNKS
case_() {
  local name=$1 rate=$2 in=$3 outTok=$4 chunks=$5
  local n=$((rate * DUR))
  echo "== $name: $rate req/s for $DUR s ($n requests), $in-token prompts, $outTok-token answers in $chunks events"
  { echo "TIMESTAMP,ContextTokens,GeneratedTokens"; for _ in $(seq "$n"); do echo "2024-01-01 00:00:00,$in,$outTok"; done; } > "$out/$name.csv"
  ./bin/servetrace convert "$out/$name.csv" --out "$out/$name-wl" >/dev/null
  ./bin/arrivallog serve -addr "127.0.0.1:$port" -chunks "$chunks" -log "$out/$name-arrivals.csv" 2>>"$out/arrivallog.err" &
  local server=$!
  trap "kill $server 2>/dev/null || true" EXIT # a failed replay must not leave the server on its port
  for _ in $(seq 50); do curl -sf "$url/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
  /usr/bin/time -f "%U %S" -o "$out/$name.time" ./bin/servetrace replay "$out/$name-wl" --target "$url" --rate "$rate" --arrival constant \
    --api chat --stream true --max-requests "$n" --out "$out/$name-run" > "$out/$name.out" 2>&1
  kill -TERM "$server"; wait "$server" || true
  ./bin/arrivallog report -log "$out/$name-arrivals.csv" -rate "$rate" -skip "$((rate / 2 + 1))" -run "$out/$name-run"
  awk '{printf "client CPU %.2f s (user %.2f, sys %.2f): %.0f µs per request, %.2f µs per event\n", $1+$2, $1, $2, 1e6*($1+$2)/n, 1e6*($1+$2)/(n*c)}' n="$n" c="$chunks" "$out/$name.time"
}
case_ long-prompts 50 131072 4 4
case_ long-answers 4 1000 32768 32768
