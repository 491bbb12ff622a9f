#!/usr/bin/env bash
# Sets everything up on a fresh machine, then asks the default model a question.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh --no-peer
scripts/build.sh build Release
echo "--- ouro generate --chat (SmolLM2-135M-Instruct, Q4_1)"
./build/ouro generate --chat --temp 0 -n 96 -p "${1:-What is the capital of France? Answer in one sentence.}"
