#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` and `llama-bench` from the llama.cpp source inside the
# pinned llama-cpp-python sdist (scripts/llama-cpp-python.version: the same version as the test
# peer), with the peer's flags: -march=native without the AMX instructions (setup.sh says why).
# For benchmarks only (bench/compare_serve.py, bench/compare_llamacpp.py), never for `make test`.
# Cached per (version, flags, CPU) under ~/.cache/ouro/llama-tools like the peer's wheel, so a
# fresh clone reuses it. Prints the folder holding the two binaries.
# Usage: scripts/build_llama_tools.sh [--quiet]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ $quiet = 1 ] || echo "build_llama_tools: $*" >&2; }

ver="$(cat scripts/llama-cpp-python.version)"
flags="-mno-amx-int8 -mno-amx-tile -mno-amx-bf16"
# The web UI is left out (its prebuilt assets would be downloaded from a model hub); the server's
# API does not need it. No libcurl (no model downloads), no OpenSSL (plain HTTP on localhost).
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags"
            -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON
            -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
key=$(printf '%s\n%s\n%s\n' "$ver" "${cmake_args[*]}" "$(grep -m1 '^flags' /proc/cpuinfo)" | sha256sum | cut -c1-16)
out="${XDG_CACHE_HOME:-$HOME/.cache}/ouro/llama-tools/$key"
if [ -x "$out/llama-server" ] && [ -x "$out/llama-bench" ]; then
  echo "$out"
  exit 0
fi
# A fresh machine: the Debian packages (CMake, Ninja, a compiler) and the venv whose pip fetches the sdist.
if [ ! -x .venv/bin/python ] || ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  say "running scripts/setup.sh --no-peer first (packages and the venv)"
  scripts/setup.sh --no-peer >&2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say "fetching the llama-cpp-python $ver sdist"
.venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$ver"
tar -xzf "$work"/llama_cpp_python-"$ver".tar.gz -C "$work"
src="$work/llama_cpp_python-$ver/vendor/llama.cpp"
[ -f "$src/tools/server/CMakeLists.txt" ] || { echo "build_llama_tools: no tools/server in the $ver sdist" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
say "building llama-server and llama-bench (several minutes once)"
cmake -S "$src" -B "$work/build" "${cmake_args[@]}" "${launcher[@]}" >"$work/configure.log" 2>&1 ||
  { tail -n 30 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server llama-bench -j "$(nproc)" >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log" >&2; exit 1; }
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-bench" "$out.tmp/"
printf '%s\n' "llama-cpp-python $ver (its vendor/llama.cpp)" "${cmake_args[*]}" >"$out.tmp/BUILD_INFO"
rm -rf "$out" && mv "$out.tmp" "$out"
say "built into $out"
echo "$out"
