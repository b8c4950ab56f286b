#!/usr/bin/env bash
# The release profile against `fast` (fat LTO, one codegen unit), side by side: the time each
# takes to build, and the runs per second of the same check and the same exploration with
# each binary. Build times are from nothing only in a fresh CARGO_TARGET_DIR:
#   CARGO_TARGET_DIR=/tmp/retrysim-profiles bash benches/profiles.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

build() {
    local profile=$1 started ended
    started=$(date +%s%N)
    cargo build --locked --quiet --profile "$profile" --bin retrysim
    ended=$(date +%s%N)
    printf '%-8s build: %s s\n' "$profile" "$(( (ended - started) / 1000000000 ))"
}

# Runs per second of `retrysim ARGS --json`, from its own count and elapsed time.
rate() {
    local binary=$1
    shift
    "$binary" "$@" --json 2>/dev/null | python3 -c '
import json, sys
report = json.load(sys.stdin)
runs = report.get("runs", report.get("executions"))
elapsed = report["elapsed_seconds"]
print(f"{runs} runs, {runs / elapsed:,.0f} runs/s")'
}

check=(check --model counter --handler keyed-sqlite --clients 2 --intents 1 --faults-max 2 --threads 1)
explore=(explore --model counter --handler keyed-sqlite --seeds 0..100000 --threads 1)

for profile in release fast; do
    build "$profile"
done
for profile in release fast; do
    binary="$target/$profile/retrysim"
    checked=$(rate "$binary" "${check[@]}")
    explored=$(rate "$binary" "${explore[@]}")
    printf '%-8s check:   %s\n%-8s explore: %s\n' "$profile" "$checked" "$profile" "$explored"
done
