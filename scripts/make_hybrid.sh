#!/usr/bin/env bash
# Makes the synthetic kimi-linear hybrid models (scripts/make_hybrid_model.py) that are missing from
# models/ and checks each against models/SHA256SUMS: the writer is seeded and deterministic, so a
# different hash means the writer, numpy or gguf-py changed, and the figures in docs/hybrid.md would
# no longer be about the same file. Idempotent (a file whose sum matches is left alone).
#   scripts/make_hybrid.sh                 hybrid-tiny F32, F16, Q8_0, Q4_1 (the tests' models, ~70 MB)
#   scripts/make_hybrid.sh --small         hybrid-small Q8_0 and Q4_1 too (benchmarks; 2.9 GB, minutes)
#   HYBRID_SMALL_TYPES=F32,F16,Q8_0,Q4_1 scripts/make_hybrid.sh --small     every type (13 GB)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
want_small=0
case "${1:-}" in
  "") ;;
  --small) want_small=1 ;;
  *) echo "make_hybrid: unknown argument '$1' (use --small or nothing)" >&2; exit 2 ;;
esac
py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python

make_one() {   # size type
  local name="hybrid-$1.$2.gguf" want got
  want=$(awk -v n="$name" '$2==n {print $1}' models/SHA256SUMS)
  if [ -z "$want" ]; then
    echo "make_hybrid: no SHA-256 for $name in models/SHA256SUMS" >&2
    exit 1
  fi
  if [ -f "models/$name" ] && [ "$(sha256sum "models/$name" | cut -d' ' -f1)" = "$want" ]; then
    return 0
  fi
  "$py" scripts/make_hybrid_model.py --size "$1" --types "$2" --out models
  got=$(sha256sum "models/$name" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "make_hybrid: SHA-256 mismatch for $name: got $got, want $want (the writer, numpy or gguf-py changed)" >&2
    exit 1
  fi
}
for t in F32 F16 Q8_0 Q4_1; do make_one tiny "$t"; done
if [ $want_small = 1 ]; then
  IFS=, read -r -a small_types <<< "${HYBRID_SMALL_TYPES:-Q8_0,Q4_1}"
  for t in "${small_types[@]}"; do make_one small "$t"; done
fi
