#!/usr/bin/env bash
# The README's first command: install what is missing (Debian/Ubuntu), build a release build and
# run the default benchmark sweep. Extra arguments go to attn-bench (see --help), e.g.
#   bash bench/run.sh --d 64,128 --threads 2
# Environment: BUILD_DIR (default build-release), NO_INSTALL=1 to skip the package step.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build-release}"
packages=(gcc libc6-dev meson ninja-build pkg-config libsimde-dev libopenblas-dev gnuplot-nox)

missing=()
if [[ "${NO_INSTALL:-0}" != 1 ]] && command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if ((${#missing[@]})); then
  echo "run.sh: installing ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
  else
    echo "run.sh: missing packages: ${missing[*]} (not root and no sudo: install them and re-run)" >&2
    exit 1
  fi
fi

if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" --buildtype=release -Dtests=disabled -Dbench=enabled
fi
ninja -C "$build" bench/attn-bench

"$build/bench/attn-bench" "$@"
