// AVX-512 peak-compute loops for the machine probe (lab/probe.cpp). Compiled with AVX-512 flags;
// called only after CPUID says the CPU has the features. Deliberately free of standard-library
// code: an inline function instantiated here would be compiled with AVX-512 and could be the copy
// the linker keeps for the whole program.
#include <immintrin.h>

#include "lab/probe_kernels.h"

namespace ouro::probe_detail {

// The empty asm makes a register opaque, so the compiler can neither hoist the instruction that
// reads it out of the loop nor fold the loop; it emits no instruction.
#define OURO_OPAQUE(x) __asm__ volatile("" : "+v"(x))

float fp32_fma_avx512(long iters) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(0.5f + 0.01f * i);
  __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (long it = 0; it < iters; ++it) {
    OURO_OPAQUE(a);
    OURO_OPAQUE(b);
#pragma GCC unroll 16
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);  // lane 0 depends on every chain
}

float bf16_dot_avx512(long iters) {
  __m512 acc[kDotChains];
  for (int i = 0; i < kDotChains; ++i) acc[i] = _mm512_setzero_ps();
  // 1/64 and 1/128 are exact in bf16; the sums stay far from overflow for any practical count.
  __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.015625f), _mm512_set1_ps(0.015625f));
  __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.0078125f), _mm512_set1_ps(0.0078125f));
  for (long it = 0; it < iters; ++it) {
    OURO_OPAQUE(a);
    OURO_OPAQUE(b);
#pragma GCC unroll 16
    for (int i = 0; i < kDotChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kDotChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);  // lane 0 depends on every chain
}

int int8_dot_avx512vnni(long iters) {
  __m512i acc[kDotChains];
  for (int i = 0; i < kDotChains; ++i) acc[i] = _mm512_setzero_si512();
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (long it = 0; it < iters; ++it) {
    OURO_OPAQUE(a);
    OURO_OPAQUE(b);
#pragma GCC unroll 16
    for (int i = 0; i < kDotChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < kDotChains; ++i) s = _mm512_add_epi32(s, acc[i]);
  return _mm512_cvtsi512_si32(s);  // lane 0 depends on every chain
}

}  // namespace ouro::probe_detail
