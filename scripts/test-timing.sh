#!/bin/sh
# Runs the timing tests (TestTiming*, without -race, one package at a time)
# and, when some fail, reruns just those once, saying so: a burst of load on
# a shared 2-core machine can spoil one measurement, a real regression fails
# twice. A failure that names no timing test (a build error, a panic) is not
# rerun. Usage: scripts/test-timing.sh GO PACKAGES...
set -u
go=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if "$go" test -p 1 -count=1 -timeout 8m -run '^TestTiming' "$@" >"$log" 2>&1; then
	cat "$log"
	exit 0
fi
cat "$log"
failed=$(sed -n 's/^--- FAIL: \(TestTiming[A-Za-z0-9_]*\).*/\1/p' "$log" | sort -u | paste -sd '|' -)
if [ -z "$failed" ]; then
	echo "test-timing: the timing tests failed before any test could (see above); not rerunning"
	exit 1
fi
echo "test-timing: rerunning the failed timing tests once: $failed"
exec "$go" test -p 1 -count=1 -timeout 8m -run "^($failed)\$" "$@"
