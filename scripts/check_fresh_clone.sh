#!/usr/bin/env bash
# Clone the committed state into a temporary directory and run the README's two commands there,
# exactly as a newcomer (and CI) would. Usage: scripts/check_fresh_clone.sh [test|demo|both|bench]
# (bench: a quick `make bench`, one run of the throughput lines, to check the target installs and runs)
set -euo pipefail
what="${1:-both}"
top="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
git clone --quiet "$top" "$dir/kinsumer"
cd "$dir/kinsumer"
if [[ "$what" == "test" || "$what" == "both" ]]; then
  time make test
fi
if [[ "$what" == "demo" || "$what" == "both" ]]; then
  time make demo
fi
if [[ "$what" == "bench" ]]; then
  time make bench BENCH_ARGS="--runs 1 --records 8000 --only throughput,overhead"
fi
echo "fresh clone OK: $what"
