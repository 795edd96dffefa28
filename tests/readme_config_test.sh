#!/usr/bin/env bash
# The README's configuration table is the relay's own reference output: they must not drift.
set -euo pipefail
relay_bin=$1 readme=$2
missing=0
while IFS= read -r line; do
  grep -qF -- "$line" "$readme" || { echo "README lacks: $line"; missing=1; }
done < <("$relay_bin" --print-config-reference)
exit $missing
