#!/usr/bin/env bash
# The test command: runs aguard's whole test suite on a fresh machine.
#
# It installs what the tests need first (Go modules, and the official AG-UI
# npm clients the interop tests run), then checks formatting and vet, runs
# every test with the race detector, and fuzzes each parser for a bounded time.
# Set FUZZTIME (default 5s) to fuzz longer.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-5s}

echo "== installing test dependencies"
go mod download
npm ci --prefix interop --no-audit --no-fund --loglevel=error
# The ledger's tests start throwaway redis-server processes of their own
# (internal/redistest), a Redis Cluster of them (redis-cli --cluster
# create) and redis-sentinel processes; only the binaries are needed.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-sentinel >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server redis-sentinel >/dev/null
fi
# The admin approvals page's test (admin/ui_test.go) drives it in headless
# Chromium through chromedp; only the binary is needed.
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './interop/node_modules/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 ./...

echo "== fuzzing each parser for $fuzztime"
# Go minimizes every input that finds new coverage, for up to 60 s by
# default; a target that spends its time there tests nothing. Minimizing is
# capped, and each target must run at least min_execs inputs.
min_execs=${FUZZ_MIN_EXECS:-1000}
#
# Go 1.26's fuzzing coordinator can fail a run with a bare "context deadline
# exceeded" as -fuzztime expires (golang/go#75804, fixed in Go 1.27): no
# failing input is written. Such a run is retried once; any other failure,
# and any run that wrote a failing input, fails the suite.
#
# Before fuzzing, Go runs every input of the target's corpus (its testdata and
# the inputs cached from earlier runs on this machine) to gather baseline
# coverage; on a busy machine that can take the whole -fuzztime. A run that
# never finished its baseline is run again, once, for four times as long: the
# executions counted are still only those after the baseline.
fuzz_once() {
  go test -run '^$' -fuzz "^$2\$" -fuzztime "${3:-$fuzztime}" -fuzzminimizetime 100x "$1" 2>&1
}
fuzz() {
  local out execs
  if ! out=$(fuzz_once "$1" "$2"); then
    if echo "$out" | grep -q 'context deadline exceeded' && ! echo "$out" | grep -q 'Failing input written'; then
      echo "$1 $2: the fuzzing coordinator stopped on its own deadline (golang/go#75804); running it again"
      out=$(fuzz_once "$1" "$2") || { echo "$out"; return 1; }
    else
      echo "$out"
      return 1
    fi
  fi
  execs=$(echo "$out" | sed -n 's/.*execs: \([0-9]*\).*/\1/p' | tail -n 1)
  if [ -z "$execs" ] && echo "$out" | grep -q 'gathering baseline coverage'; then
    echo "$1 $2: the baseline coverage did not finish in $fuzztime; running it again for longer"
    local longer=$fuzztime
    [[ ${fuzztime%s} =~ ^[0-9]+$ ]] && longer="$(( ${fuzztime%s} * 4 ))s"
    out=$(fuzz_once "$1" "$2" "$longer") || { echo "$out"; return 1; }
    execs=$(echo "$out" | sed -n 's/.*execs: \([0-9]*\).*/\1/p' | tail -n 1)
  fi
  echo "$1 $2: ${execs:-0} executions in $fuzztime"
  if [ "${execs:-0}" -lt "$min_execs" ]; then
    echo "$out" >&2
    echo "$2 made no real progress: ${execs:-0} executions (want at least $min_execs)" >&2
    return 1
  fi
}
fuzz ./sse FuzzEvents
fuzz ./internal/chunked FuzzChunked
fuzz ./agui FuzzScan
fuzz ./agui FuzzParseRunInput
fuzz ./agui FuzzStream
fuzz ./downgrade FuzzBridge
fuzz ./internal/jsonedit FuzzEdit
fuzz ./policy FuzzDecodeJSONTerm
