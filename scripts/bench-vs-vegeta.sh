#!/usr/bin/env bash
# Side by side, in one run: servetrace replay and vegeta offer the same
# constant-rate load of streamed 100-token chat requests to arrivallog, an
# independent loopback server that logs each arrival and first byte. For
# each client: the server-side arrival error against the schedule, the
# client's CPU, and for servetrace its own lateness figures and the latency
# it added (its TTFT minus the server's first byte since arrival).
# RATE (req/s), DUR (s) and RATES (several rates) set the load.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
RATES=${RATES:-${RATE:-1000}}
DUR=${DUR:-10}
VEGETA=github.com/tsenart/vegeta/v12@v12.13.0
out=.cache/bench-vegeta
rm -rf "$out" && mkdir -p "$out" bin
$GO build -o bin/servetrace ./cmd/servetrace
$GO build -o bin/arrivallog ./cmd/arrivallog
[ -x bin/vegeta ] || GOBIN="$PWD/bin" $GO install "$VEGETA"
port=18123
url="http://127.0.0.1:$port"
prompt=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 11))
printf '{"model":"arrivallog","messages":[{"role":"user","content":"%s"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}' "$prompt" > "$out/body.json"
printf 'POST %s/v1/chat/completions\nContent-Type: application/json\n@%s\n' "$url" "$out/body.json" > "$out/targets.txt"

serve() { # serve LOG: start arrivallog, wait until it answers
  ./bin/arrivallog serve -addr "127.0.0.1:$port" -log "$1" 2>>"$out/arrivallog.err" &
  server=$!
  for _ in $(seq 50); do curl -sf "$url/v1/models" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "arrivallog did not start" >&2; exit 1
}
stop() { kill -TERM "$server"; wait "$server" || true; }
cpu() { awk '{printf "client CPU %.2f s (user %.2f, sys %.2f), %.1f µs per request\n", $1+$2, $1, $2, 1e6*($1+$2)/n}' n="$1" "$2"; }

for rate in $RATES; do
  n=$((rate * DUR))
  echo "== $rate req/s for $DUR s ($n requests)"
  # A workload of n requests of 100 tokens; --rate sets their timing.
  { echo "TIMESTAMP,ContextTokens,GeneratedTokens"; for i in $(seq "$n"); do echo "2024-01-01 00:00:00,100,4"; done; } > "$out/wl.csv"
  rm -rf "$out/wl" && ./bin/servetrace convert "$out/wl.csv" --out "$out/wl" >/dev/null

  serve "$out/vegeta-$rate.csv"
  /usr/bin/time -f "%U %S" -o "$out/vegeta-$rate.time" ./bin/vegeta attack -rate "$rate/s" -duration "${DUR}s" -targets "$out/targets.txt" > "$out/vegeta-$rate.bin"
  stop
  echo "-- vegeta v12.13.0"
  ./bin/arrivallog report -log "$out/vegeta-$rate.csv" -rate "$rate" -skip 10
  ./bin/vegeta report -type text < "$out/vegeta-$rate.bin" | grep -E "^Latencies|^Success"
  cpu "$n" "$out/vegeta-$rate.time"

  serve "$out/servetrace-$rate.csv"
  /usr/bin/time -f "%U %S" -o "$out/servetrace-$rate.time" ./bin/servetrace replay "$out/wl" --target "$url" --rate "$rate" --arrival constant \
    --api chat --stream true --max-requests "$n" --out "$out/run-$rate" > "$out/servetrace-$rate.out"
  stop
  echo "-- servetrace $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  ./bin/arrivallog report -log "$out/servetrace-$rate.csv" -rate "$rate" -skip 10 -run "$out/run-$rate"
  cpu "$n" "$out/servetrace-$rate.time"
done
