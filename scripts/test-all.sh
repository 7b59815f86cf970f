#!/usr/bin/env bash
# Builds and runs every test suite of attn: native x86-64 (or whatever this host is), the same
# under ASan + UBSan, every path through SIMDe's portable code (-DSIMDE_NO_NATIVE), and AArch64
# under qemu-user (NEON native there, AVX2 through SIMDe). Installs its own Debian packages when
# run as root (or with sudo) on a machine that lacks them. Prints Check's summary lines.
# Usage: bash scripts/test-all.sh [native|sanitize|emul|aarch64|install|fuzz|tsan ...]
#   (default: all seven)
#   install: meson install to a scratch prefix, then build docs/example.c against it with
#   pkg-config; build it again from a project that uses attn as a Meson subproject; and run the
#   native suite against the shared library (-Ddefault_library=shared).
#   fuzz: the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, the library built with
#   -fsanitize=fuzzer-no-link: the sanitize suite's build, build-asan, which has them too; each
#   suite runs its own tests), each for ATTN_FUZZ_SECONDS seconds (default 60; the state and api
#   targets a third of it), two at a time: about 2.5 minutes. NaN/Inf inputs are injected and
#   checked against the library's non-finite policy (-Dfuzz_nonfinite=false turns that off).
#   tsan: tests/check_threads.c (first use racing from several threads; calls while another
#   thread switches the ISA path) under ThreadSanitizer, with no suppressions.
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
  if [ -f "$dir/meson-private/coredata.dat" ]; then meson setup --reconfigure "$dir" "$@" >/dev/null
  else rm -rf "$dir" && meson setup "$dir" "$@" >/dev/null; fi
}

run_suite() { # name, build dir, meson setup args...; $only_suite / $skip_suite (optional): run only / all but that Meson suite
  local name=$1 dir=$2 t0=$SECONDS; shift 2
  echo "== $name: meson setup $dir $*"
  # (set -e does not apply inside a function called from an || list: every step says || return 1)
  setup_dir "$dir" "$@" || return 1
  ninja -C "$dir" >/dev/null || return 1
  echo "== $name: built in $((SECONDS - t0)) s"
  local rc=0 t1=$SECONDS
  meson test -C "$dir" --num-processes "$(nproc)" --print-errorlogs ${only_suite:+--suite "$only_suite"} \
    ${skip_suite:+--no-suite "$skip_suite"} || rc=$?
  echo "== $name: tests ran in $((SECONDS - t1)) s; Check summaries"
  grep -hE '^[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$dir/meson-logs/testlog.txt" | sort | uniq -c || true
  grep -E '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):' "$dir/meson-logs/testlog.txt" | sed "s/^/   $name /" || true
  return $rc
}

install_checks() {
  local prefix dir=build-install
  prefix=$(mktemp -d)
  echo "== install: meson install into $prefix, example against pkg-config"
  setup_dir "$dir" --prefix "$prefix" --libdir lib -Dtests=disabled -Dbench=disabled || return 1
  ninja -C "$dir" >/dev/null && meson install -C "$dir" >/dev/null || return 1
  local flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs --static attn) || return 1
  cc -std=c11 -Wall -Wextra -Werror docs/example.c $flags -o "$prefix/example" || return 1
  "$prefix/example" || return 1
  echo "== install: attn as a Meson subproject"
  local cons
  cons=$(mktemp -d)
  cp tests/consumer/meson.build "$cons/"
  mkdir -p "$cons/subprojects" "$cons/docs"
  ln -s "$PWD" "$cons/subprojects/attn"
  ln -s "$PWD/docs/example.c" "$cons/docs/example.c"
  (cd "$cons" && meson setup build -Dattn:tests=disabled -Dattn:bench=disabled >/dev/null && ninja -C build >/dev/null &&
    meson test -C build) || return 1
  rm -rf "$prefix" "$cons"
  echo "== install: shared library build, native suite"
  run_suite shared build-shared --buildtype=debugoptimized -Dbench=disabled -Ddefault_library=shared || return 1
  echo "== install: shared library exports only the API"
  local bad
  bad=$(nm -D --defined-only build-shared/src/libattn.so | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^attn_/ {print $3}' |
    grep -vE '^(_init|_fini|__bss_start|_edata|_end)$' || true)
  [ -z "$bad" ] || { echo "unexpected exported symbols: $bad"; return 1; }
  [ "$(nm -D --defined-only build-shared/src/libattn.so | grep -c ' T attn_f32_')" = 0 ] || { echo "kernels exported"; return 1; }
}

# sanitize and fuzz share one build (clang, ASan + UBSan, the library with fuzzer coverage)
asan_args=(--buildtype=debugoptimized -Dbench=disabled -Db_sanitize=address,undefined -Db_lundef=false
  -Dfuzz=true -Dfuzz_seconds="${ATTN_FUZZ_SECONDS:-60}")
status=0
for s in "${suites[@]}"; do
  case "$s" in
    native) run_suite native build-test --buildtype=debugoptimized -Dbench=disabled || status=1 ;;
    sanitize)
      skip_suite=fuzz CC=clang run_suite sanitize build-asan "${asan_args[@]}" || status=1 ;;
    emul) run_suite emul build-emul --buildtype=debugoptimized -Dbench=disabled -Dsimde_no_native=true || status=1 ;;
    aarch64)
      run_suite aarch64 build-aarch64 --buildtype=debugoptimized -Dbench=disabled \
        --cross-file tests/cross/aarch64-linux-gnu.ini || status=1 ;;
    install) install_checks || status=1 ;;
    fuzz)
      only_suite=fuzz CC=clang run_suite fuzz build-asan "${asan_args[@]}" || status=1 ;;
    tsan)
      only_suite=threads CC=clang run_suite tsan build-tsan --buildtype=debugoptimized -Dbench=disabled \
        -Db_sanitize=thread -Db_lundef=false || status=1 ;;
    *) echo "unknown suite: $s (native|sanitize|emul|aarch64|install|fuzz|tsan)" >&2; exit 2 ;;
  esac
done
[ $status = 0 ] && echo "== all suites passed" || echo "== SOME SUITES FAILED"
exit $status
