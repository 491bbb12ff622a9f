#!/usr/bin/env bash
# The whole test suite: unit tests, oracle tests (numpy reference, Hugging Face tokenizers,
# llama.cpp), CLI bad-input tests, the server's tests (openai client, curl, fuzzed bodies, soak),
# a bounded libFuzzer run, the unit tests under ASan+UBSan and the server under TSan.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
FUZZ_SECONDS="${OURO_FUZZ_SECONDS:-60}"

step() { printf '\n=== %s\n' "$*"; }

step "setup (packages, venv, peer, model)"
scripts/setup.sh

step "release build"
scripts/build.sh build Release

step "unit tests (ctest)"
ctest --test-dir build --output-on-failure -j 2

step "oracle and CLI tests (pytest)"
.venv/bin/python -m pytest -q tests/oracle tests/cli tests/trace tests/lab tests/serve tests/quality tests/agent

step "ASan+UBSan build and unit tests"
scripts/build.sh build-asan RelWithDebInfo -DOURO_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j 2

step "CLI bad-input tests on the ASan+UBSan binary"
# The address-space-limit cases are left out: ASan reserves terabytes of virtual memory.
OURO_BIN=build-asan/ouro UBSAN_OPTIONS=halt_on_error=1 .venv/bin/python -m pytest -q tests/cli/test_bad_input.py \
  -k "not memory_limit and not out_of_memory and not thread_creation"

step "ThreadSanitizer build and the server's concurrency tests"
# Cancellation, queueing and shutdown cross the HTTP thread, the scheduler thread and the pool;
# halt_on_error turns any report into a failed request and a nonzero exit the tests catch.
TARGETS=ouro scripts/build.sh build-tsan RelWithDebInfo -DOURO_TSAN=ON
OURO_BIN=build-tsan/ouro TSAN_OPTIONS="halt_on_error=1" .venv/bin/python -m pytest -q tests/serve/test_reliability.py \
  -k "disconnect or signal_with"

step "libFuzzer: GGUF reader for ${FUZZ_SECONDS}s"
TARGETS=fuzz_gguf scripts/build.sh build-fuzz RelWithDebInfo -DOURO_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++
mkdir -p build-fuzz/corpus build-fuzz/crashes
.venv/bin/python tests/fuzz/make_seeds.py build-fuzz/corpus
if ! ./build-fuzz/fuzz_gguf -max_total_time="$FUZZ_SECONDS" -max_len=131072 -timeout=10 -rss_limit_mb=2048 \
     -artifact_prefix=build-fuzz/crashes/ build-fuzz/corpus tests/fuzz/regressions >build-fuzz/fuzz.log 2>&1; then
  tail -n 40 build-fuzz/fuzz.log
  echo "fuzz_gguf found a crash: see build-fuzz/crashes/ (add it to tests/fuzz/regressions/ once fixed)"
  exit 1
fi
grep -E '^(#[0-9]+|Done)' build-fuzz/fuzz.log | tail -n 2

echo
echo "all test stages passed"
