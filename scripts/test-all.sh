#!/usr/bin/env bash
# Builds and runs every test suite of attn: native x86-64 (or whatever this host is; plus a CPU
# without AVX2 under qemu-x86_64 -cpu Nehalem), the same under ASan + UBSan, every path through
# SIMDe's portable code (-DSIMDE_NO_NATIVE), AArch64 under qemu-user (NEON native there, AVX2 and
# AVX-512 through SIMDe), install checks, libFuzzer targets and ThreadSanitizer. Installs its own
# Debian packages when run as root (or with sudo) on a machine that lacks them. Prints Check's
# summary lines.
# Usage: bash scripts/test-all.sh [native|sanitize|emul|aarch64|install|fuzz|tsan ...]
#   (default: all seven)
#   Every build is made first, one after another (each on every core); then the suites' tests
#   run in two lanes side by side, one test at a time in each, the longest suite first, so that
#   both cores stay busy until the end. Each suite's output is printed when it ends.
#   install: the native suite's build (both library kinds from the same objects, made with a
#   scratch prefix) installed there; docs/example.c built against it with pkg-config and by a
#   CMake project (find_package);
#   every ATTN_API function exported by the shared library and nothing else, and the examples
#   run on it; attn as a Meson subproject (its tests and bench off by default).
#   fuzz: the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, the library built with
#   -fsanitize=fuzzer-no-link: the sanitize suite's build, build-asan, which has them too; each
#   suite runs its own tests), each for ATTN_FUZZ_SECONDS seconds (default 15; the state and api
#   targets a third of it). NaN/Inf inputs are injected and checked against the library's
#   non-finite policy (-Dfuzz_nonfinite=false turns that off).
#   tsan: tests/check_threads.c (first use racing from several threads; calls while another
#   thread switches the ISA path) and the parallel suite under ThreadSanitizer, no suppressions.
# Environment: ATTN_TEST_LANES (default: the CPUs online, at most 2 and at least 1).
set -euo pipefail
cd "$(dirname "$0")/.."

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(native sanitize emul aarch64 install fuzz tsan)

need_pkgs=(meson ninja-build pkg-config gcc check libsimde-dev)
for s in "${suites[@]}"; do
  case "$s" in
    sanitize | fuzz | tsan) need_pkgs+=(clang libclang-rt-14-dev) ;;
    aarch64) need_pkgs+=(qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross) ;;
    native) need_pkgs+=(qemu-user libopenblas-dev) ;; # qemu -cpu Nehalem: the no-AVX2 test; LAPACK: suite analyze
    install) need_pkgs+=(cmake) ;;
  esac
done
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
# dpkg-query rather than dpkg -s: once check:arm64 is installed the bare name "check" is ambiguous
installed() { dpkg-query -W -f='${db:Status-Status}\n' "$1" 2>/dev/null | grep -qx installed; }
missing=()
for p in "${need_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [[ " ${suites[*]} " == *" aarch64 "* ]] && ! installed check:arm64; then
  missing+=(check:arm64)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  if [[ " ${missing[*]} " == *":arm64"* ]]; then as_root dpkg --add-architecture arm64; fi
  apt_log=$(mktemp) # apt's own lines (debconf's notes among them) only when it fails
  if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
    >"$apt_log" 2>&1; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    exit 1
  fi
  rm -f "$apt_log"
fi

setup_dir() { # build dir, meson setup args...: reconfigure a valid build tree, else start afresh
  local dir=$1; shift
  local out rc=0
  if [ -f "$dir/meson-private/coredata.dat" ]; then out=$(meson setup --reconfigure "$dir" "$@" 2>&1) || rc=$?
  else rm -rf "$dir" && { out=$(meson setup "$dir" "$@" 2>&1) || rc=$?; }; fi
  [ $rc = 0 ] || echo "$out" | tail -n 20 # meson's error is on its standard output
  return $rc
}

build_suite() { # name, build dir, [targets...] --, meson setup args...
  local name=$1 dir=$2 t0=$SECONDS targets=(); shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do targets+=("$1"); shift; done
  shift
  echo "== $name: meson setup $dir $*"
  setup_dir "$dir" "$@" || return 1
  ninja -C "$dir" "${targets[@]}" >"$dir/build.log" 2>&1 || { cat "$dir/build.log"; return 1; }
  echo "== $name: built in $((SECONDS - t0)) s"
}

test_suite() { # name, build dir, extra meson test args...: one test at a time (a lane)
  local name=$1 dir=$2 t0=$SECONDS rc=0; shift 2
  # (a log of its own: sanitize and fuzz run in one build directory at the same time)
  meson test -C "$dir" --no-rebuild --num-processes 1 --print-errorlogs --logbase "$name" "$@" || rc=$?
  echo "== $name: tests ran in $((SECONDS - t0)) s; Check summaries"
  grep -hE '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$dir/meson-logs/$name.txt" | sort | uniq -c || true
  grep -E '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):' "$dir/meson-logs/$name.txt" | sed "s/^/   $name /" || true
  return $rc
}

install_checks() {
  # The native build (both library kinds, the same objects; set up with the prefix), installed.
  # (A release build of its own was the longest part of this suite, for no check of its own.)
  local prefix=$install_prefix dir=build-test t0=$SECONDS
  echo "== install: meson install into $prefix (static and shared), example against pkg-config"
  meson install -C "$dir" --no-rebuild >/dev/null || return 1
  local flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs --static attn) || return 1
  # libattn.so sits beside libattn.a: -Bstatic makes -lattn the archive, so that the private
  # libraries pkg-config --static lists are what the link needs
  flags=${flags/-lattn/-Wl,-Bstatic -lattn -Wl,-Bdynamic}
  cc -std=c11 -Wall -Wextra -Werror docs/example.c $flags -o "$prefix/example" || return 1
  if ldd "$prefix/example" | grep -q libattn; then echo "the static example links libattn.so"; return 1; fi
  "$prefix/example" >/dev/null || return 1
  echo "== install: a CMake project finds the package (find_package(attn), attn::attn)"
  cmake -S tests/consumer-cmake -B "$prefix/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DATTN_EXAMPLE="$PWD/docs/example.c" >"$prefix/cmake.log" 2>&1 &&
    cmake --build "$prefix/cmake-build" >>"$prefix/cmake.log" 2>&1 || { cat "$prefix/cmake.log"; return 1; }
  "$prefix/cmake-build/example" >/dev/null || return 1
  echo "== install: the shared library: every ATTN_API function exported, nothing else; the examples run on it"
  local so="$prefix/lib/libattn.so" declared exported missing bad
  declared=$(grep -A1 '^ATTN_API' include/attn.h | grep -oE '\battn_[a-z0-9_]+\(' | tr -d '(' | sort -u)
  exported=$(nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | sort -u)
  missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
  [ -z "$missing" ] || { echo "declared but not exported: $missing"; return 1; }
  bad=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^attn_/ {print $3}' |
    grep -vE '^(_init|_fini|__bss_start|_edata|_end)$' || true)
  [ -z "$bad" ] || { echo "unexpected exported symbols: $bad"; return 1; }
  [ "$(nm -D --defined-only "$so" | grep -c ' T attn_f32_.*ukernel')" = 0 ] || { echo "kernels exported"; return 1; }
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs attn) || return 1
  local ex n=0
  for ex in docs/example.c examples/*.c; do
    [ -f "$ex" ] || continue
    cc -std=c11 -O1 -fopenmp "$ex" $flags -lm -o "$prefix/ex" || return 1
    LD_LIBRARY_PATH="$prefix/lib" "$prefix/ex" >/dev/null || { echo "$ex failed on the shared library"; return 1; }
    n=$((n + 1))
  done
  echo "== install: $n programs ran on the shared library"
  echo "== install: attn as a Meson subproject (its tests and bench off by default there)"
  local cons
  cons=$(mktemp -d)
  cp tests/consumer/meson.build "$cons/"
  mkdir -p "$cons/subprojects" "$cons/docs"
  ln -s "$PWD" "$cons/subprojects/attn"
  ln -s "$PWD/docs/example.c" "$cons/docs/example.c"
  (cd "$cons" && meson setup build >"$cons/setup.log" 2>&1 || { cat "$cons/setup.log"; exit 1; }
    # the subproject's own targets: the library alone (no check_*, attn-bench or attn-analyze)
    if ninja -C build -t targets all | grep -qE 'check_|attn-bench|attn-analyze'; then
      echo "the subproject built its tests or bench"; exit 1
    fi
    ninja -C build >/dev/null && meson test -C build >/dev/null) || return 1
  rm -rf "$cons"
  echo "== install: passed in $((SECONDS - t0)) s"
}

# sanitize and fuzz share one build (clang, ASan + UBSan, the library with fuzzer coverage)
asan_args=(--buildtype=debugoptimized -Dbench=disabled -Db_sanitize=address,undefined -Db_lundef=false
  -Dfuzz=true -Dfuzz_seconds="${ATTN_FUZZ_SECONDS:-15}")
want() { [[ " ${suites[*]} " == *" $1 "* ]]; }
for s in "${suites[@]}"; do
  case "$s" in native | sanitize | emul | aarch64 | install | fuzz | tsan) ;;
    *) echo "unknown suite: $s (native|sanitize|emul|aarch64|install|fuzz|tsan)" >&2; exit 2 ;;
  esac
done
t_all=$SECONDS
status=0
failed=()

# Test jobs run in lanes: each job's output goes to its log, printed whole when it ends.
lanes=${ATTN_TEST_LANES:-$(nproc 2>/dev/null || echo 1)}
[ "$lanes" -gt 2 ] && lanes=2
[ "$lanes" -lt 1 ] && lanes=1
logs=$(mktemp -d)
declare -A pid_of_job
running=0
# A failed job's essentials, kept for the end of the run (CI may keep only the output's tail):
# meson's failing tests, Check's failing assertions, sanitizer and libFuzzer reports.
digest() {
  grep -E '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS) ' "$logs/$1.log" | head -n 12 || true
  grep -E ':[EF]:[^:]*:[^:]*:[0-9]+: ' "$logs/$1.log" | head -n 12 || true
  grep -E '(ERROR: [A-Za-z]+Sanitizer|runtime error:|SUMMARY: |deadly signal|Test unit written|Base64: |attn fuzz \(path)' \
    "$logs/$1.log" | head -n 12 || true
} >"$logs/$1.digest"
finish_one() { # wait for any job, print its log, record its status
  local pid rc=0 name
  wait -n -p pid || rc=$?
  for name in "${!pid_of_job[@]}"; do
    if [ "${pid_of_job[$name]}" = "$pid" ]; then
      cat "$logs/$name.log"
      [ $rc = 0 ] || { echo "== $name: FAILED (exit $rc)"; status=1; failed+=("$name (exit $rc)"); digest "$name"; }
      unset "pid_of_job[$name]"
    fi
  done
  running=$((running - 1))
}
launch() { # name, command line of this script's functions and fixed words (split on spaces)
  [ $running -lt "$lanes" ] || finish_one
  (eval "$2") >"$logs/$1.log" 2>&1 &
  pid_of_job[$1]=$!
  running=$((running + 1))
}

# 1. The builds, one after another, each on every core. A suite whose build failed is not run.
# (Starting the AArch64 tests beside the other builds was tried: the builds took twice as long,
# and the whole run a minute more.)
declare -A built
build_one() {
  if build_suite "$@"; then built[$1]=1; else
    status=1
    failed+=("$1 (build)")
    grep -E '(error|Error|ERROR)' "$2/build.log" 2>/dev/null | head -n 12 >"$logs/$1.digest" || true
  fi
}
if want aarch64; then
  build_one aarch64 build-aarch64 -- --buildtype=debugoptimized -Dbench=disabled \
    --cross-file tests/cross/aarch64-linux-gnu.ini
fi
if want sanitize || want fuzz; then CC=clang build_one sanitize build-asan -- "${asan_args[@]}"; fi
# native: its bench --quick --dry-run test; install: its library installed (install_checks)
install_prefix=$(mktemp -d)
if want native || want install; then
  build_one native build-test -- --buildtype=debugoptimized -Dbench=enabled -Ddefault_library=both \
    --prefix "$install_prefix" --libdir lib
fi
want emul && build_one emul build-emul -- --buildtype=debugoptimized -Dbench=disabled -Dsimde_no_native=true
if want tsan; then
  CC=clang build_one tsan build-tsan tests/check_threads tests/check_parallel -- --buildtype=debugoptimized \
    -Dbench=disabled -Db_sanitize=thread -Db_lundef=false
fi

# 2. The suites' tests, longest first, in the lanes.
want aarch64 && [ -n "${built[aarch64]:-}" ] && launch aarch64 "test_suite aarch64 build-aarch64 --timeout-multiplier 3"
[ -n "${built[sanitize]:-}" ] && want sanitize && launch sanitize "test_suite sanitize build-asan --no-suite fuzz --timeout-multiplier 2"
want native && [ -n "${built[native]:-}" ] && launch native "test_suite native build-test --timeout-multiplier 2"
[ -n "${built[sanitize]:-}" ] && want fuzz && launch fuzz "test_suite fuzz build-asan --suite fuzz"
want emul && [ -n "${built[emul]:-}" ] && launch emul "test_suite emul build-emul --timeout-multiplier 2"
want tsan && [ -n "${built[tsan]:-}" ] && launch tsan "test_suite tsan build-tsan --suite threads --timeout-multiplier 3"
want install && [ -n "${built[native]:-}" ] && launch install install_checks
while [ $running -gt 0 ]; do finish_one; done
echo "== every suite ran in $((SECONDS - t_all)) s"
for f in "${failed[@]}"; do
  echo "== failed: $f"
  n=${f%% *}
  [ -f "$logs/$n.digest" ] && sed 's/^/   /' "$logs/$n.digest"
done
rm -rf "$logs" "$install_prefix"
[ $status = 0 ] && echo "== all suites passed" || echo "== SOME SUITES FAILED"
exit $status
