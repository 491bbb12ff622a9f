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
if [ $want_peer = 1 ] && ! .venv/bin/python -c 'import llama_cpp' 2>/dev/null; then
  echo "setup: building llama-cpp-python from its sdist (the peer; takes several minutes once)"
  CMAKE_ARGS="-DGGML_NATIVE=ON" .venv/bin/python -m pip install -q --no-binary llama-cpp-python \
    "llama-cpp-python==$(cat scripts/llama-cpp-python.version)"
fi

# 3. The default model
scripts/fetch_model.sh
