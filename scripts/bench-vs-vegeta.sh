#!/usr/bin/env bash
# Side by side, in one run: servetrace replay and vegeta offer the same
# constant-rate load of streamed 100-token chat requests to arrivallog, an
# independent loopback server that logs each arrival and first byte. For
# each client: the server-side arrival error against the schedule, the
# client's CPU, and for servetrace its own lateness figures and the latency
# it added (its TTFT minus the server's first byte since arrival).
# RATE (req/s), DUR (s) and RATES (several rates) set the load; CHUNKS
# (content events per answer, default 4) and ITL (the server's wait between
# them, a Go duration, default none) its streams. CLIENT_CPU and SERVER_CPU
# pin the client and the server with taskset, and each run then reports how
# busy the two cores were (from /proc/stat: a saturated server core means the
# rate measures the server, not the client).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
RATES=${RATES:-${RATE:-1000}}
DUR=${DUR:-10}
CHUNKS=${CHUNKS:-4}
ITL=${ITL:-0s}
CLIENT_CPU=${CLIENT_CPU:-}
SERVER_CPU=${SERVER_CPU:-}
pin() { if [ -n "$1" ]; then echo "taskset -c $1"; fi; }
client=$(pin "$CLIENT_CPU")
server_pin=$(pin "$SERVER_CPU")
VEGETA=github.com/tsenart/vegeta/v12@v12.13.0
out=.cache/bench-vegeta
rm -rf "$out" && mkdir -p "$out" bin
$GO build -o bin/servetrace ./cmd/servetrace
$GO build -o bin/arrivallog ./cmd/arrivallog
[ -x bin/vegeta ] || GOBIN="$PWD/bin" $GO install "$VEGETA"
port=18123
url="http://127.0.0.1:$port"
prompt=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 11))
printf '{"model":"arrivallog","messages":[{"role":"user","content":"%s"}],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}' "$prompt" "$CHUNKS" > "$out/body.json"
printf 'POST %s/v1/chat/completions\nContent-Type: application/json\n@%s\n' "$url" "$out/body.json" > "$out/targets.txt"

serve() { # serve LOG: start arrivallog, wait until it answers
  $server_pin ./bin/arrivallog serve -addr "127.0.0.1:$port" -log "$1" -chunks "$CHUNKS" -itl "$ITL" 2>>"$out/arrivallog.err" &
  server=$!
  for _ in $(seq 50); do curl -sf "$url/v1/models" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "arrivallog did not start" >&2; exit 1
}
stop() { kill -TERM "$server"; wait "$server" || true; }
# busy CPU...: snapshot the pinned cores' counters; busy: how busy each was since.
snap() { [ -n "$CLIENT_CPU$SERVER_CPU" ] && grep -E "^cpu($CLIENT_CPU|$SERVER_CPU) " /proc/stat > "$out/stat.before" || true; }
busy() {
  [ -n "$CLIENT_CPU$SERVER_CPU" ] || return 0
  grep -E "^cpu($CLIENT_CPU|$SERVER_CPU) " /proc/stat | paste "$out/stat.before" - |
    awk -v c="cpu$CLIENT_CPU" -v s="cpu$SERVER_CPU" '{b=($13+$14+$15+$18+$19)-($2+$3+$4+$7+$8); i=($16+$17)-($5+$6); st=$20-$9
      who=($1==c ? "client" : "server"); printf "%s core %s busy %.0f%% (steal %.0f%%)  ", who, substr($1,4), 100*b/(b+i+st), 100*st/(b+i+st)}'; echo
}
cpu() { awk '{printf "client CPU %.2f s (user %.2f, sys %.2f), %.1f µs per request\n", $1+$2, $1, $2, 1e6*($1+$2)/n}' n="$1" "$2"; }

for rate in $RATES; do
  n=$((rate * DUR))
  echo "== $rate req/s for $DUR s ($n requests)"
  # A workload of n requests of 100 tokens; --rate sets their timing.
  { echo "TIMESTAMP,ContextTokens,GeneratedTokens"; for i in $(seq "$n"); do echo "2024-01-01 00:00:00,100,$CHUNKS"; done; } > "$out/wl.csv"
  rm -rf "$out/wl" && ./bin/servetrace convert "$out/wl.csv" --out "$out/wl" >/dev/null

  serve "$out/vegeta-$rate.csv"
  snap
  /usr/bin/time -f "%U %S" -o "$out/vegeta-$rate.time" $client ./bin/vegeta attack -rate "$rate/s" -duration "${DUR}s" -targets "$out/targets.txt" > "$out/vegeta-$rate.bin"
  busy > "$out/vegeta-$rate.busy"
  stop
  echo "-- vegeta v12.13.0"
  ./bin/arrivallog report -log "$out/vegeta-$rate.csv" -rate "$rate" -skip 10
  ./bin/vegeta report -type text < "$out/vegeta-$rate.bin" | grep -E "^Requests|^Latencies|^Success"
  cpu "$n" "$out/vegeta-$rate.time"
  cat "$out/vegeta-$rate.busy"

  serve "$out/servetrace-$rate.csv"
  snap
  /usr/bin/time -f "%U %S" -o "$out/servetrace-$rate.time" $client ./bin/servetrace replay "$out/wl" --target "$url" --rate "$rate" --arrival constant \
    --api chat --stream true --max-requests "$n" --out "$out/run-$rate" > "$out/servetrace-$rate.out"
  busy > "$out/servetrace-$rate.busy"
  stop
  echo "-- servetrace $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  ./bin/arrivallog report -log "$out/servetrace-$rate.csv" -rate "$rate" -skip 10 -run "$out/run-$rate"
  cpu "$n" "$out/servetrace-$rate.time"
  cat "$out/servetrace-$rate.busy"
done
