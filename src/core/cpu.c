/* CPU feature detection. x86: CPUID + XGETBV; AArch64: NEON is architectural; 32-bit Arm: HWCAP. */
#include "core/internal.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__arm__) && defined(__linux__)
#include <sys/auxv.h>
#endif

uint32_t attn_cpu_decode_x86(uint32_t max_leaf, uint32_t leaf1_ecx, uint32_t leaf7_ebx, uint64_t xcr0) {
  const uint32_t fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29, avx2 = 1u << 5;
  const uint32_t avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F, DQ, BW, VL */
  const uint64_t ymm_state = (1u << 1) | (1u << 2);             /* XCR0: SSE and AVX state saved by the OS */
  const uint64_t zmm_state = (1u << 5) | (1u << 6) | (1u << 7); /* opmask, ZMM_Hi256, Hi16_ZMM */
  if (max_leaf < 7) return 0;
  if ((leaf1_ecx & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c)) return 0; /* F16C: K/V in fp16 */
  if ((xcr0 & ymm_state) != ymm_state) return 0;
  if (!(leaf7_ebx & avx2)) return 0;
  uint32_t f = ATTN_CPU_X86_AVX2_FMA;
  if ((leaf7_ebx & avx512) == avx512 && (xcr0 & zmm_state) == zmm_state) f |= ATTN_CPU_X86_AVX512;
  return f;
}

uint32_t attn_cpu_vendor_x86(uint32_t ebx, uint32_t edx, uint32_t ecx) {
  char name[13];
  const uint32_t w[3] = {ebx, edx, ecx}; /* the name's bytes, each register's low byte first */
  for (int i = 0; i < 12; i++) name[i] = (char)(w[i / 4] >> (8 * (i % 4)) & 0xff);
  name[12] = 0;
  return strcmp(name, "AuthenticAMD") == 0 || strcmp(name, "HygonGenuine") == 0 ? ATTN_CPU_X86_AMD : 0;
}

uint32_t attn_cpu_features(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  const uint32_t max_leaf = a, vendor = attn_cpu_vendor_x86(b, d, c);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const uint32_t leaf1_ecx = c;
  uint32_t leaf7_ebx = 0;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    leaf7_ebx = b;
  }
  uint64_t xcr0 = 0;
  if (leaf1_ecx & (1u << 27)) { /* OSXSAVE: XGETBV is allowed */
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv */
    xcr0 = ((uint64_t)hi << 32) | lo;
  }
  return attn_cpu_decode_x86(max_leaf, leaf1_ecx, leaf7_ebx, xcr0) | vendor;
#elif defined(__aarch64__)
  return ATTN_CPU_ARM_NEON;
#elif defined(__arm__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & (1u << 12)) ? ATTN_CPU_ARM_NEON : 0; /* HWCAP_NEON */
#else
  return 0;
#endif
}
