#!/usr/bin/env bash
# One prepared run for a borrowed machine with more cores or wider vectors than the development
# host (the lent "device" machine: an AVX-512 server CPU, 15 minutes of machine time in all, so
# one call of about 6-8 minutes that leaves time for a second). It measures what the open
# targets need, made for a shared, noisy guest (the same call moved by 1.5-1.9x between runs
# there):
#   1. one call's thread scaling (--scaling, the thread counts in turn twice: --rounds 2, then
#      each count in alternation with one thread, the "paired" columns; the pool's workers pinned
#      from CPU PIN on, attn_pool_pin) of
#      softmax and causal linear prefill (identity, elu+1, GLA) with each of SCAL_HEADS heads,
#      n = 4k and 16k, and of one decode step over 64k and 128k cached tokens with fp32 and fp16
#      K/V, 8 heads;
#   2. every prefill variant at n = 4k and 16k on the vector paths the CPU runs natively
#      (AVX-512 and AVX2, or NEON), pinned to one core, without baselines: one invocation per
#      family with --rounds ROUNDS, so that each point's paths run one after the other, ROUNDS
#      times, each keeping its best median, and a ratio between paths sees the same stretch of
#      the machine; summary.md has each path's time, the widest path over the next (AVX-512 over
#      AVX2) and the widest path's fraction of the FMA peak;
#   3. causal linear prefill (identity, elu+1) with 8 heads at n = 4k on the widest path, Q, K,
#      V and O token-major then head-major (--linear-layout), twice, then one call's scaling on
#      1 and 2 threads in each layout (layout.txt: on a Zen 5 guest two threads ran 1.25-1.67x
#      faster than one with token-major inputs, 1.87-2.11x with head-major ones);
#   4. softmax full and causal at n = 1k, 4k and 16k on the widest path against the naive
#      baselines the bench has (OpenBLAS, oneDNN), --rounds ROUNDS (baselines.txt);
#   5. softmax causal against full at n = 1k, 2k, 3k and 4k on the widest path: each n in an
#      invocation of its own (fresh buffers), then all four in one, then 8 heads at 1k and 2k
#      (cliff.txt). On the lent Xeon causal ran at 44-59% of the peak at 1k-2k and 60-66% from 3k
#      (full: 61-69%; AVX2's causal dropped likewise below 4k), on the Zen 5 guest at 69-75%
#      throughout: whether the drop follows the size, the buffers' history or the call's length.
# Every step runs under what is left of a time limit, and whatever finished is kept. OUT_DIR gets
# seven files (the device machine returns at most eight): summary.md, scaling.txt, layout.txt,
# baselines.txt, cliff.txt, machine.txt and device-check.tgz, every invocation's output and CSV.
# Usage: bash bench/device-check.sh [BENCH [OUT_DIR]]
#   BENCH: an attn-bench built elsewhere (default build-release/bench/attn-bench); OUT_DIR:
#   default $OUT when set (the device machine's), else device-results.
# Environment: ROUNDS (3), SIZES (4k,16k), PIN (2), THREADS (1,2,4,8,16, capped at the CPUs),
#   SCAL_HEADS (the head counts of step 1: "1 16"), FAMILIES (step 2's families in order:
#   "linear softmax gau selective"), STEPS (which of "scaling prefill layout baselines cliff" to
#   run: all),
#   LIMIT (seconds in all, 420), LIB_DIR (libraries the bench needs that the machine lacks, such
#   as libopenblas: put on LD_LIBRARY_PATH), QUICK=1 (a smoke test: n = 1k, one round, scaling
#   1,2, a few variants). OPENBLAS_CORETYPE, when unset, names the CPU's widest core (SkylakeX
#   with AVX-512, Haswell with AVX2): OpenBLAS 0.3.21 does not know the lent Xeon (family 6
#   model 207) and ran its Prescott (SSE3) kernels there, an unfair baseline.
set -uo pipefail

bench=${1:-build-release/bench/attn-bench}
out=${2:-${OUT:-device-results}}
rounds=${ROUNDS:-3} sizes=${SIZES:-4k,16k} pin=${PIN:-2} limit=${LIMIT:-420}
families=${FAMILIES:-linear softmax gau selective} scal_heads=${SCAL_HEADS:-1 16}
steps=" ${STEPS:-scaling prefill layout baselines cliff} "
scal_variants=softmax_causal,linear_identity_causal,linear_elu1_causal,linear_gla_causal scal_n=4k,16k scal_n_one=4k
dec_variants=softmax_decode,softmax_decode_f16 dec_min=64k dec_max=128k base_sizes=1k,4k,16k
cpus=$(nproc)
threads=${THREADS:-1,2,4,8,16}
quick=${QUICK:-0}
if [[ $quick == 1 ]]; then
  rounds=1 sizes=1k threads=1,2 scal_n=1k scal_n_one=1k dec_min=4k dec_max=4k base_sizes=1k families=linear scal_heads=1
fi
threads=$(echo "$threads" | tr ',' '\n' | awk -v c="$cpus" '$1 <= c' | paste -sd,)
[[ -n ${LIB_DIR:-} ]] && export LD_LIBRARY_PATH="$LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out" || exit 1
work=$(mktemp -d) || exit 1
if ! "$bench" --help >/dev/null 2>&1; then
  echo "device-check: $bench does not run here (missing libraries? see LIB_DIR):" >&2
  "$bench" --help 2>&1 | head -3 >&2
  exit 1
fi

# The prefill variants of a family (softmax, linear, gau, selective), from the bench's own list.
prefill_of() {
  if [[ $quick == 1 ]]; then
    echo linear_identity_causal,linear_favor_causal
    return
  fi
  "$bench" --help | awk -v f="$1" '/^Variants:/ { on = 1; next } on && $1 ~ "^" f "_" && $1 !~ /decode/ { print $1 }' |
    paste -sd,
}

# The paths, widest first: those the CPU runs natively (the bench would emulate the others).
flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null)
isas=()
[[ " $flags " == *" avx512f "* ]] && isas+=(avx512)
[[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]] && isas+=(avx2)
[[ " $flags " == *" asimd "* ]] && isas+=(neon)
((${#isas[@]})) || isas=(scalar)
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  [[ ${isas[0]} == avx512 ]] && export OPENBLAS_CORETYPE=SkylakeX
  [[ ${isas[0]} == avx2 ]] && export OPENBLAS_CORETYPE=Haswell
fi
{
  date -u
  echo "cpus online: $cpus; paths: ${isas[*]}; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}"
  (lscpu 2>/dev/null || grep -m1 'model name' /proc/cpuinfo)
  uptime
} >"$work/machine.txt"
echo "device-check: paths ${isas[*]}, $rounds rounds, n = $sizes, threads $threads, limit $limit s -> $out"

start=$SECONDS
left() { echo $((limit - (SECONDS - start))); }
step() { # name, attn-bench arguments...: one invocation, under what is left of the limit
  local name=$1 t
  shift
  t=$(left)
  if ((t < 20)); then
    echo "device-check: $name skipped, the time limit is spent"
    return 1
  fi
  echo "device-check: $name ($((SECONDS - start)) s)"
  timeout "$t" "$bench" "$@" --no-plot --out-dir "$work" >"$work/$name.txt" 2>&1 ||
    echo "device-check: $name ended with status $?"
  return 0
}

# 1. thread scaling of one call on the widest path (the thread targets first: the prefill rounds
#    take what time is left): prefill with each head count, then one decode step over 64k and
#    128k cached tokens, fp32 and fp16 K/V, 8 heads
[[ $steps == *" scaling "* ]] || scal_heads=
for heads in $scal_heads; do
  step "scaling-h$heads" --scaling "$threads" --rounds 2 --heads "$heads" --variants "$scal_variants" \
    --sizes "$scal_n" --isa "${isas[0]}" --pin "$pin" --no-baselines || break
done
if [[ $steps == *" scaling "* ]]; then
  step scaling-decode --scaling "$threads" --rounds 2 --heads 8 --variants "$dec_variants" --cache-min "$dec_min" \
    --cache-max "$dec_max" --isa "${isas[0]}" --pin "$pin" --no-baselines
fi

# 2. every prefill, each point's paths in turn, a family per invocation (a CSV per finished family)
isa_list=$(IFS=,; echo "${isas[*]}")
[[ $steps == *" prefill "* ]] || families=
for fam in $families; do
  step "p-$fam" --variants "$(prefill_of "$fam")" --sizes "$sizes" --isa "$isa_list" --rounds "$rounds" \
    --pin "$pin" --min-time 0.15 --reps 3 --no-extend --no-baselines --csv "$work/p-$fam.csv" --json /dev/null \
    --md /dev/null || break
done

# 3. the layout of a linear prefill's Q, K, V and O with several heads, in turn
if [[ $steps == *" layout "* ]]; then
  for r in 1 2; do
    for layout in token head; do
      step "layout-$r-$layout" --variants linear_identity_causal,linear_elu1_causal --heads 8 --sizes "$scal_n_one" \
        --isa "${isas[0]}" --linear-layout "$layout" --pin "$pin" --min-time 0.15 --reps 3 --no-extend --no-baselines \
        --csv /dev/null --json /dev/null --md /dev/null || break 2
    done
  done
  for layout in token head; do # and one call on 1 and 2 threads in each layout
    step "layout-scaling-$layout" --scaling 1,2 --rounds 2 --variants linear_identity_causal,linear_elu1_causal \
      --heads 8 --sizes "$scal_n_one" --isa "${isas[0]}" --linear-layout "$layout" --pin "$pin" --no-baselines || break
  done
fi

# 4. softmax prefill on the widest path against the naive baselines (the fraction-of-peak and
#    OpenBLAS targets)
if [[ $steps == *" baselines "* ]]; then
  step baselines --variants softmax_full,softmax_causal --sizes "$base_sizes" --isa "${isas[0]}" --rounds "$rounds" \
    --pin "$pin" --min-time 0.15 --reps 3 --no-extend --csv "$work/baselines.csv" --json /dev/null --md /dev/null
fi

# 5. softmax causal against full below 4k: each n alone, then together, then 8 heads
if [[ $steps == *" cliff "* ]]; then
  cliff_step() { # name, attn-bench arguments...: softmax full and causal on the widest path, a CSV
    local name=$1
    shift
    step "$name" --variants softmax_full,softmax_causal --isa "${isas[0]}" --rounds 2 --pin "$pin" --min-time 0.15 \
      --reps 3 --no-extend --no-baselines --csv "$work/$name.csv" --json /dev/null --md /dev/null "$@"
  }
  for n in 1k 2k 3k 4k; do cliff_step "cliff-alone-$n" --sizes "$n" || break; done
  cliff_step cliff-together --sizes 1k,2k,3k,4k && cliff_step cliff-heads8 --sizes 1k,2k --heads 8
  for f in "$work"/cliff-*.csv; do
    [[ -f $f ]] || continue
    awk -F, -v run="$(basename "$f" .csv)" '
      /^#/ { next }
      $1 == "variant" { for (i = 1; i <= NF; i++) col[$i] = i; next }
      { for (i = 1; i <= NF; i++) gsub(/"/, "", $i)
        if ($col["state"] == "ok")
          printf "%-16s %-16s n %6s heads %2s %9.3f ms %6.1f GFLOP/s %3.0f%% of peak\n", run, $col["variant"],
            $col["n_q"], $col["heads"], $col["median_ns"] / 1e6, $col["gflops"], 100 * $col["frac_peak"] }' "$f"
  done >"$work/cliff.txt"
  cat "$work/cliff.txt"
fi

# summary.md: per variant and n, each path's best median over the rounds (ms), the widest path
# over the next, and the widest path's fraction of its peak.
shopt -s nullglob
csvs=("$work"/p-*.csv)
if ((${#csvs[@]})); then
  awk -F, -v wide="${isas[0]}" -v next_="${isas[1]:-}" '
    /^#/ { next }
    $1 == "variant" { for (i = 1; i <= NF; i++) col[$i] = i; next }
    {
      for (i = 1; i <= NF; i++) gsub(/"/, "", $i)
      if ($col["state"] != "ok") next
      k = $col["variant"] SUBSEP $col["n_q"]; isa = $col["isa"]; ms = $col["median_ns"] / 1e6
      if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
      if (!((k, isa) in best) || ms < best[k, isa]) { best[k, isa] = ms; peak[k, isa] = $col["frac_peak"] }
    }
    END {
      if (next_ != "") {
        printf "| variant | n | %s ms | %s ms | %s / %s | %s fraction of peak |\n", wide, next_, wide, next_, wide
        print "|---|---:|---:|---:|---:|---:|"
      } else {
        printf "| variant | n | %s ms | %s fraction of peak |\n", wide, wide
        print "|---|---:|---:|---:|"
      }
      for (i = 1; i <= nk; i++) {
        split(keys[i], kv, SUBSEP); k = keys[i]
        w = (k, wide) in best ? sprintf("%.3g", best[k, wide]) : "-"
        x = next_ != "" && (k, next_) in best ? sprintf("%.3g", best[k, next_]) : "-"
        ratio = next_ != "" && (k, wide) in best && (k, next_) in best ? sprintf("%.2fx", best[k, next_] / best[k, wide]) : "-"
        fp = (k, wide) in best && peak[k, wide] != "" ? sprintf("%.0f%%", 100 * peak[k, wide]) : "-"
        if (next_ != "") printf "| %s | %s | %s | %s | %s | %s |\n", kv[1], kv[2], w, x, ratio, fp
        else printf "| %s | %s | %s | %s |\n", kv[1], kv[2], w, fp
      }
    }' "${csvs[@]}" >"$work/summary.md"
  cat "$work/summary.md"
fi
for f in "$work"/scaling-*.txt; do grep -E '^(Thread scaling|variant|machine: (read|FMA)|softmax|linear|gau|selective)' "$f"; done |
  tee "$work/scaling.txt"
# The layouts' rows, invocation by invocation.
for f in "$work"/layout-*.txt; do echo "${f##*/}"; grep -E '^(\[|variant|linear)' "$f"; done | tee "$work/layout.txt"
# The baselines' table: the sweep's rows, the speedup ranges and the FMA peaks.
[[ -f $work/baselines.txt ]] && sed -n '/^Sweep/,/^wrote/p;/^Speedup ranges/,/^Run quality/p' "$work/baselines.txt" |
  grep -v '^wrote' | tee "$work/baselines-table.txt"
for f in summary.md scaling.txt layout.txt cliff.txt machine.txt; do [[ -f $work/$f ]] && cp "$work/$f" "$out/"; done
[[ -f $work/baselines-table.txt ]] && cp "$work/baselines-table.txt" "$out/baselines.txt"
tar czf "$out/device-check.tgz" -C "$work" . && rm -rf "$work"
echo "device-check: done in $((SECONDS - start)) s; $out: summary.md, scaling.txt, layout.txt, baselines.txt," \
  "cliff.txt, machine.txt, device-check.tgz"
