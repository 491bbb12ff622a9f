#!/usr/bin/env bash
# The whole test suite: unit tests, oracle tests (numpy reference, Hugging Face tokenizers,
# llama.cpp), CLI bad-input tests, the server's tests (openai client, curl, fuzzed bodies, soak),
# a bounded libFuzzer run, the unit tests under ASan+UBSan and the server under TSan; then the
# kernel-dependent tests again with the AVX2 kernels forced (on an AVX-512 host) and the logits
# oracle with the scalar kernels, so a host of either kind runs every kernel family.
# Each stage's wall time is printed when it ends and summed up at the end (docs/testing.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
FUZZ_RUNS="${OURO_FUZZ_RUNS:-60000}"

stage_names=() stage_secs=()
stage_name="" stage_t0=$SECONDS
end_stage() {
  if [ -n "$stage_name" ]; then
    stage_names+=("$stage_name"); stage_secs+=($((SECONDS - stage_t0)))
    printf '=== %s: %d s\n' "$stage_name" $((SECONDS - stage_t0))
  fi
  stage_name=""
}
step() { end_stage; stage_name="$*"; stage_t0=$SECONDS; printf '\n=== %s\n' "$*"; }

step "setup (packages, venv, peer, model)"
scripts/setup.sh

step "release build"
scripts/build.sh build Release

step "unit tests (ctest)"
ctest --test-dir build --output-on-failure -j 2

step "oracle and CLI tests (pytest)"
.venv/bin/python -m pytest -q --durations=25 tests/oracle tests/cli tests/trace tests/lab tests/serve tests/quality tests/agent

step "ASan+UBSan build and unit tests"
scripts/build.sh build-asan RelWithDebInfo -DOURO_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j 2

step "CLI bad-input tests on the ASan+UBSan binary"
# The address-space-limit cases are left out: ASan reserves terabytes of virtual memory.
OURO_BIN=build-asan/ouro UBSAN_OPTIONS=halt_on_error=1 .venv/bin/python -m pytest -q tests/cli/test_bad_input.py \
  -k "not memory_limit and not out_of_memory and not thread_creation"

step "ThreadSanitizer build and the server's concurrency tests"
# Cancellation, queueing and shutdown cross the HTTP thread, the scheduler thread and the pool;
# halt_on_error turns any report into a failed request and a nonzero exit the tests catch. This
# build has the server's commands only (CMakeLists.txt, OURO_TSAN): a third of the compiling.
TARGETS=ouro scripts/build.sh build-tsan RelWithDebInfo -DOURO_TSAN=ON
OURO_BIN=build-tsan/ouro TSAN_OPTIONS="halt_on_error=1" .venv/bin/python -m pytest -q tests/serve/test_reliability.py \
  -k "disconnect or signal_with"

step "libFuzzer: GGUF reader, ${FUZZ_RUNS} inputs"
# Bounded by count, not time: the same amount of fuzzing on a fast and a slow host.
TARGETS=fuzz_gguf scripts/build.sh build-fuzz RelWithDebInfo -DOURO_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++
mkdir -p build-fuzz/corpus build-fuzz/crashes
.venv/bin/python tests/fuzz/make_seeds.py build-fuzz/corpus
if ! ./build-fuzz/fuzz_gguf -runs="$FUZZ_RUNS" -max_len=131072 -timeout=10 -rss_limit_mb=2048 \
     -artifact_prefix=build-fuzz/crashes/ build-fuzz/corpus tests/fuzz/regressions >build-fuzz/fuzz.log 2>&1; then
  tail -n 40 build-fuzz/fuzz.log
  echo "fuzz_gguf found a crash: see build-fuzz/crashes/ (add it to tests/fuzz/regressions/ once fixed)"
  exit 1
fi
grep -E '^(#[0-9]+|Done)' build-fuzz/fuzz.log | tail -n 2

isa_cap="${OURO_ISA:-auto}"
if [ "$isa_cap" != auto ] && [ "$isa_cap" != avx512 ]; then
  end_stage
  echo
  echo "=== OURO_ISA=$isa_cap for the whole suite: the runs above already used the capped kernels"
elif grep -qw avx512f /proc/cpuinfo; then
  step "AVX2 kernels forced (OURO_ISA=avx2): oracle, CLI and serve tests"
  # What an AVX2-only host runs, bit for bit (docs/testing.md). The soak, the load test, the
  # reliability tests and the error tests exercise the scheduler and the HTTP layer, not the kernels:
  # once is enough. The hybrid files' tests run llama.cpp and numpy only, not ouro; the bit-identity
  # test and the ISA-agreement test run every kernel family themselves; the tokenizer has no
  # ISA-dependent code.
  OURO_ISA=avx2 .venv/bin/python -m pytest -q tests/oracle tests/cli tests/serve \
    --ignore=tests/serve/test_reliability.py --ignore=tests/serve/test_loadtest.py --ignore=tests/cli/test_bad_input.py \
    --ignore=tests/serve/test_errors.py --ignore=tests/oracle/test_hybrid_reference.py \
    --ignore=tests/oracle/test_hybrid_files.py --ignore=tests/oracle/test_bit_identity.py \
    --ignore=tests/oracle/test_tokenizer.py --deselect tests/cli/test_generate.py::test_isas_agree_on_greedy_text
else
  end_stage
  echo
  echo "=== no AVX-512 on this host: the runs above already used the AVX2 kernels"
fi

step "scalar kernels (OURO_ISA=scalar): the logits oracle"
# Four prompts, 1, 4, 42 and 74 tokens (the decode shape, short and long prefill, attention over
# several 16-token KV blocks), run every scalar kernel; the 99-, 121- and 512-token prompts only add
# positions at about 0.25 s each with these kernels, the last-row test's chat prompt repeats one, and
# the reference's own tests run no ouro at all.
OURO_ISA=scalar .venv/bin/python -m pytest -q tests/oracle/test_logits.py \
  -k "not long512 and not code and not repeated and not (last_row_only and chat) and not reference_sanity and not bounds_calibration"

end_stage
echo
echo "stage times (s):"
for i in "${!stage_names[@]}"; do printf '  %5d  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}"; done
printf '  %5d  total\n' "$SECONDS"
echo "all test stages passed"
