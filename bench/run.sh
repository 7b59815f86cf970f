#!/usr/bin/env bash
# The README's first command: install what is missing (Debian/Ubuntu), build a release build and
# run the default benchmark sweep, a thread-scaling table, then attn-analyze (the seeds' claims
# measured). Results go to
# <repository>/bench-results/ (the analysis to bench-results/analysis/). Extra arguments go
# to attn-bench (see --help), e.g.
#   bash bench/run.sh --d 64,128 --threads 2
# Environment: BUILD_DIR (default build-release), NO_INSTALL=1 to skip the package step.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build-release}"
packages=(gcc libc6-dev meson ninja-build pkg-config libsimde-dev libopenblas-dev libdnnl-dev gnuplot-nox)

missing=()
if [[ "${NO_INSTALL:-0}" != 1 ]] && command -v dpkg-query >/dev/null 2>&1; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if ((${#missing[@]})); then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "run.sh: missing packages: ${missing[*]} (not root and no sudo: install them and re-run)" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  # One line here; apt's own output goes to a log that is shown only if the install fails.
  log="$(mktemp -t attn-run-apt.XXXXXX.log)"
  echo "run.sh: installing ${missing[*]} (log: $log)"
  if ! { "${sudo[@]}" apt-get update &&
         "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "run.sh: installing ${missing[*]} failed (log above, kept in $log)" >&2
    exit 1
  fi
  rm -f "$log"
fi

if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" --buildtype=release -Dtests=disabled -Dbench=enabled
elif ((${#missing[@]})); then
  meson setup --reconfigure "$build" # find the baseline libraries just installed
fi
ninja -C "$build" bench/attn-bench

"$build/bench/attn-bench" --out-dir "$root/bench-results" "$@"

# Thread scaling: one call on 1, 2, 4, ... threads up to the CPUs online (attn_pool through
# attn_shape.threads), 8 heads, prefill at 4k and decode over 64k and 128k cached tokens; the
# counts measured in turn twice (--rounds 2), each keeping its best median.
cpus=$(nproc)
counts=1
for ((t = 2; t < cpus; t *= 2)); do counts+=",$t"; done
((cpus > 1)) && counts+=",$cpus"
"$build/bench/attn-bench" --out-dir "$root/bench-results" --scaling "$counts" --rounds 2 --heads 8 --sizes 4k \
  --cache-min 64k --cache-max 128k --no-baselines --no-plot \
  --variants softmax_causal,softmax_full,linear_elu1_causal,gau_causal,selective_causal,softmax_decode,gau_decode |
  sed -n '/^Thread scaling/,$p'

# Decode over a large cache with the cache in transparent huge pages (--hugepages), beside the
# sweep's decode rows (default pages): fp32, fp16 and bf16 K/V, 8 heads, 64k and 128k cached tokens.
# Where the kernel has THP (its mode madvise or always).
thp=/sys/kernel/mm/transparent_hugepage/enabled
if [[ -r $thp ]] && ! grep -q '\[never\]' "$thp"; then
  echo
  echo "Decode with the K/V cache in huge pages (--hugepages; the sweep above used default pages):"
  "$build/bench/attn-bench" --out-dir "$root/bench-results/hugepages" --hugepages --heads 8 --cache-min 64k \
    --cache-max 128k --no-baselines --no-plot --variants softmax_decode,softmax_decode_f16,softmax_decode_bf16 |
    grep -E '^(memory:| +variant|\[)' || true
fi

# Then the seeds' claims, measured (bench/analyze): attn-analyze's full run, when the build found
# LAPACK. Its tables go to a log; the summary is printed; a failed check fails the script.
analysis="$root/bench-results/analysis"
# (grep reads the whole list: with -q it could exit before ninja's last write, and pipefail would
# turn ninja's SIGPIPE into "not built": seen in 11 of 300 tries)
if ninja -C "$build" -t targets all 2>/dev/null | grep '^bench/analyze/attn-analyze:' >/dev/null; then
  ninja -C "$build" bench/analyze/attn-analyze >/dev/null
  mkdir -p "$analysis"
  rc=0
  "$build/bench/analyze/attn-analyze" --out-dir "$analysis" >"$analysis/attn-analyze.log" 2>&1 || rc=$?
  echo
  sed -n '/^== attn-analyze summary/,$p' "$analysis/attn-analyze.log"
  echo "run.sh: the analysis (Markdown, CSV, JSON, SVG) is in $analysis; its full output in $analysis/attn-analyze.log"
  exit $rc
fi
echo "run.sh: attn-analyze was not built (LAPACK not found: install libopenblas-dev and reconfigure)"
