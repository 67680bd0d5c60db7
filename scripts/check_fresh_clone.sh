#!/usr/bin/env bash
# Clone the committed state into a temporary directory and run the README's two commands there,
# exactly as a newcomer (and CI) would. Usage: scripts/check_fresh_clone.sh [test|demo|both]
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
echo "fresh clone OK: $what"
