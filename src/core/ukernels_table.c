/*
 * One micro-kernel table per path, built from the list in src/ukernels.inc as "scalar, then
 * override" (BLIS's reference-then-arch contexts, dav1d's C-then-arch init): every slot starts
 * with the scalar path's kernel or tuning, then takes the path's own where the list has one.
 * Compiled without ISA flags: it stores addresses and numbers and runs no path's code.
 */
#include "core/internal.h"

/* One constant per row; a path listing a slot twice is a compile error, and so is a slot the
 * scalar path does not fill (every other path inherits it). */
enum {
#define ATTN_GEMM(isa, name, mr, nr)  attn_has_##isa##_gemm_, attn_has_##isa##_gemm_nr_,
#define ATTN_UKERNEL(isa, slot, name) attn_has_##isa##_##slot##_,
#define ATTN_TUNING(isa, slot, value) attn_has_##isa##_##slot##_,
#include "ukernels.inc"
#undef ATTN_GEMM
#undef ATTN_UKERNEL
#undef ATTN_TUNING
};
#define ATTN_SCALAR_HAS_(slot) _Static_assert(attn_has_SCALAR_##slot##_ >= 0, "scalar fills " #slot);
ATTN_UKERNEL_SLOTS(ATTN_SCALAR_HAS_, ATTN_SCALAR_HAS_)
#undef ATTN_SCALAR_HAS_

/* Store the kernels and tunings the list gives path `from`. */
static void attn_ukernels_override(struct attn_ukernels *t, attn_isa from) {
#define ATTN_GEMM(isa, name, mr, nr) \
  if (from == ATTN_ISA_##isa) {      \
    t->gemm = name;                  \
    t->gemm_nr = nr;                 \
  }
#define ATTN_UKERNEL(isa, slot, name) \
  if (from == ATTN_ISA_##isa) t->slot = name;
#define ATTN_TUNING(isa, slot, value) \
  if (from == ATTN_ISA_##isa) t->slot = value;
#include "ukernels.inc"
#undef ATTN_GEMM
#undef ATTN_UKERNEL
#undef ATTN_TUNING
}

void attn_ukernels_init(struct attn_ukernels *t, attn_isa isa) {
  *t = (struct attn_ukernels){.isa = isa};
  attn_ukernels_override(t, ATTN_ISA_SCALAR);
  if (isa != ATTN_ISA_SCALAR) attn_ukernels_override(t, isa);
}

/* A decode step streams its K/V rows from memory through few_scores and few_pv. On AMD's cores
 * (Zen 4, AVX-512 and AVX2 paths) their L1 prefetches held the stream back: into L2 only, a
 * step over 4k keys (one head of 64, fp32) ran 1.8x faster, 8 heads of 128 token-major 1.33x,
 * head-major 1.9x (fp32 and fp16) (measured: 67762bf); one head of rows at most 128 bytes apart
 * (fp16 at d = 64) ran fastest with no software prefetch, 1.3x (measured: 42e88e0). Intel's
 * cores keep L1 (one head ran 5% slower there with L2; measured: 79bc357). */
void attn_ukernels_tune(struct attn_ukernels *t, uint32_t cpu) {
  if (cpu & ATTN_CPU_X86_AMD) t->few_pf = ATTN_FEW_PF_L2;
}
