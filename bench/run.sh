#!/usr/bin/env bash
# The README's first command: install what is missing (Debian/Ubuntu), build a release build, then
#   by default: the representative sweep (attn-bench --quick: every family's main cases on the
#     best path, a few sizes, the baselines, the crossover and the plot), its full table in
#     bench-results/attn-bench.log, a progress line and a one-screen summary; then attn-analyze's
#     quick run;
#   with --full: the whole sweep (every variant on every native path up to 64k tokens) printed as
#     it runs, a thread-scaling table, decode with the K/V cache in huge pages and attn-analyze's
#     full run.
# Results go to <repository>/bench-results/ (the analysis to bench-results/analysis/). Other
# arguments go to attn-bench (see --help), e.g.
#   bash bench/run.sh --d 64,128          bash bench/run.sh --full --threads 2
# Environment: BUILD_DIR (default build-release), NO_INSTALL=1 to skip the package step.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build-release}"
out="$root/bench-results"
packages=(gcc libc6-dev meson ninja-build pkg-config libsimde-dev libopenblas-dev libdnnl-dev gnuplot-nox)

full=0 help=0 args=()
for a in "$@"; do
  case "$a" in
    --full) full=1 ;;
    --help | -h) help=1 ;;
    *) args+=("$a") ;;
  esac
done

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

# The build, likewise one line: Meson's and ninja's output go to a log shown only on failure.
# attn-analyze is built where Meson found LAPACK (its target exists). (grep reads the whole target
# list: with -q it could exit before ninja's last write, and pipefail would turn ninja's SIGPIPE
# into "not built".)
log="$(mktemp -t attn-run-build.XXXXXX.log)"
echo "run.sh: building $build (log: $log)"
analyze=0
if ! {
  if [[ ! -f "$build/build.ninja" ]]; then
    meson setup "$build" --buildtype=release -Dtests=disabled -Dbench=enabled
  elif ((${#missing[@]})); then
    meson setup --reconfigure "$build" # find the baseline libraries just installed
  fi &&
    ninja -C "$build" bench/attn-bench &&
    if ninja -C "$build" -t targets all | grep '^bench/analyze/attn-analyze:' >/dev/null; then
      analyze=1
      ninja -C "$build" bench/analyze/attn-analyze
    fi
} >"$log" 2>&1; then
  cat "$log" >&2
  echo "run.sh: building $build failed (log above, kept in $log)" >&2
  exit 1
fi
rm -f "$log"
bench="$build/bench/attn-bench"

if ((help)); then
  echo "Usage: bash bench/run.sh [--full] [attn-bench options]"
  echo "Default: attn-bench --quick (the preset below), then attn-analyze --quick; --full: the whole sweep,"
  echo "thread scaling, huge-page decode and attn-analyze's full run. attn-bench's options:"
  echo
  exec "$bench" --help
fi

# attn-analyze (bench/analyze): the seeds' claims, measured; its tables go to a log, a failed
# check fails the script. $1: --quick or nothing.
run_analysis() {
  local analysis="$out/analysis" rc=0
  if ((!analyze)); then
    echo "run.sh: attn-analyze was not built (LAPACK not found: install libopenblas-dev and reconfigure)"
    return 0
  fi
  mkdir -p "$analysis"
  "$build/bench/analyze/attn-analyze" "$@" --out-dir "$analysis" >"$analysis/attn-analyze.log" 2>&1 || rc=$?
  echo
  if ((full || rc)); then
    sed -n '/^== attn-analyze summary/,$p' "$analysis/attn-analyze.log"
  else
    last="$(tail -n 1 "$analysis/attn-analyze.log")"
    echo "attn-analyze $*: ${last#attn-analyze: }"
  fi
  echo "run.sh: the analysis (Markdown, CSV, JSON, SVG) is in $analysis; its full output in $analysis/attn-analyze.log"
  return $rc
}

if ((!full)); then
  # The representative sweep: its live table goes to a log, the progress line to the terminal
  # (stderr), then the summary attn-bench ends with.
  mkdir -p "$out"
  sweep_log="$out/attn-bench.log"
  echo "run.sh: attn-bench --quick, the representative sweep (bash bench/run.sh --full: the whole one); table: $sweep_log"
  rc=0
  "$bench" --quick --out-dir "$out" "${args[@]}" >"$sweep_log" || rc=$?
  if grep -q '^== attn-bench summary' "$sweep_log"; then
    sed -n '/^== attn-bench summary/,$p' "$sweep_log"
    echo "log       $sweep_log"
  else
    tail -n 20 "$sweep_log" >&2
  fi
  if ((rc)); then
    echo "run.sh: attn-bench exited with status $rc (a failed point or a file not written: see $sweep_log)" >&2
    exit $rc
  fi
  run_analysis --quick
  exit
fi

"$bench" --out-dir "$out" "${args[@]}"

# Thread scaling: one call on 1, 2, 4, ... threads up to the CPUs online (attn_pool through
# attn_shape.threads), 8 heads, prefill at 4k and decode over 64k and 128k cached tokens; the
# counts measured in turn twice (--rounds 2), each keeping its best median.
cpus=$(nproc)
counts=1
for ((t = 2; t < cpus; t *= 2)); do counts+=",$t"; done
((cpus > 1)) && counts+=",$cpus"
"$bench" --out-dir "$out" --scaling "$counts" --rounds 2 --heads 8 --sizes 4k \
  --cache-min 64k --cache-max 128k --no-baselines --no-plot \
  --delta-sizes 4k --delta-d 128 \
  --variants softmax_causal,softmax_full,linear_elu1_causal,gau_causal,selective_causal,softmax_decode,gau_decode,delta_gdn |
  sed -n '/^Thread scaling/,$p'

# Decode over a large cache with the cache in transparent huge pages (--hugepages), beside the
# sweep's decode rows (default pages): fp32, fp16 and bf16 K/V, 8 heads, 64k and 128k cached tokens.
# Where the kernel has THP (its mode madvise or always).
thp=/sys/kernel/mm/transparent_hugepage/enabled
if [[ -r $thp ]] && ! grep -q '\[never\]' "$thp"; then
  echo
  echo "Decode with the K/V cache in huge pages (--hugepages; the sweep above used default pages):"
  "$bench" --out-dir "$out/hugepages" --hugepages --heads 8 --cache-min 64k \
    --cache-max 128k --no-baselines --no-plot --variants softmax_decode,softmax_decode_f16,softmax_decode_bf16 |
    grep -E '^(memory:| +variant|\[)' || true
fi

# Then the seeds' claims, measured: attn-analyze's full run.
run_analysis
