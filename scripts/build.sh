#!/usr/bin/env bash
# Configures (once) and builds one build directory.
# Usage: [TARGETS="a b"] scripts/build.sh DIR TYPE [cmake options...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"; type="$2"; shift 2
cd "$root"
# Paths relative to the checkout in ccache's keys: a fresh clone elsewhere hits what this machine
# already compiled (lab worktrees do the same, docs/lab.md).
# NOHASHDIR: the sanitizer builds carry -g, whose compile directory would otherwise key the cache
# (debug info of a hit then names the directory that first compiled it).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
fi
# Two cores on these machines: never more than two compile jobs.
# shellcheck disable=SC2086
ninja -C "$dir" -j 2 --quiet ${TARGETS:-}
