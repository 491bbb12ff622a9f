#!/usr/bin/env bash
# Installs what is missing, idempotently: Debian packages, the Python test venv, the default model.
# Usage: scripts/setup.sh [--no-peer]   (--no-peer skips building llama-cpp-python)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
want_peer=1
[ "${1:-}" = "--no-peer" ] && want_peer=0

# 1. Debian packages (C++ toolchain and libraries; each one is justified in docs/dependencies.md)
apt_pkgs=(cmake ninja-build ccache g++ clang libclang-rt-14-dev nlohmann-json3-dev libtomlplusplus-dev libgtest-dev libbenchmark-dev python3-venv time git chromium)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. Python venv for test oracles and peers (never on the engine's path)
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$py" -m venv .venv
fi
stamp=.venv/.reqs-$(sha256sum scripts/requirements-test.txt | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python test dependencies"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r scripts/requirements-test.txt
  touch "$stamp"
fi
# The peer, llama-cpp-python, built from its sdist for this CPU (-march=native) but without ggml's
# AMX backend: on AMX hosts (Sapphire Rapids under KVM, seen 2026-12-04) its Q4_1 matmul
# segfaults in ggml_backend_amx_mul_mat at the first decode. GCC keeps an explicit -mno-* over
# -march=native whatever their order. The wheel is built once per (version, flags, CPU) into
# ~/.cache/ouro/wheels, outside the clone, so a fresh clone reuses it; pip's own wheel cache is
# bypassed because it keys on the sdist alone and would hand back a wheel built with other flags.
peer_ver="$(cat scripts/llama-cpp-python.version)"
peer_args="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS=-mno-amx-int8\ -mno-amx-tile\ -mno-amx-bf16 -DCMAKE_CXX_FLAGS=-mno-amx-int8\ -mno-amx-tile\ -mno-amx-bf16"
peer_key=$(printf '%s\n%s\n%s\n' "$peer_ver" "$peer_args" "$(grep -m1 '^flags' /proc/cpuinfo)" | sha256sum | cut -c1-16)
peer_stamp=.venv/.llama-cpp-$peer_key
if [ $want_peer = 1 ] && { [ ! -f "$peer_stamp" ] || ! .venv/bin/python -c 'import llama_cpp' 2>/dev/null; }; then
  wheels="${XDG_CACHE_HOME:-$HOME/.cache}/ouro/wheels/$peer_key"
  if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python $peer_ver from its sdist (the peer; takes several minutes once)"
    rm -rf "$wheels.tmp" && mkdir -p "$wheels.tmp"
    CMAKE_ARGS="$peer_args" .venv/bin/python -m pip wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python \
      -w "$wheels.tmp" "llama-cpp-python==$peer_ver"
    rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
  fi
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheels"/llama_cpp_python-*.whl
  .venv/bin/python -m pip install -q "$wheels"/llama_cpp_python-*.whl   # its dependencies
  touch "$peer_stamp"
fi

# 3. The default model
scripts/fetch_model.sh

# 4. The synthetic hybrid (kimi-linear) models the tests use, checked against models/SHA256SUMS
#    (docs/hybrid.md); `make hybrid` adds the benchmark size.
scripts/make_hybrid.sh
