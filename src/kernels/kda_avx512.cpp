// The KDA family for AVX-512 (kernels/kda.h): kda_vec.inc over 16-float registers; tails through
// mask registers. Compiled with the AVX-512 flags, called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/kda.h"

namespace ouro {

namespace {

struct V {
  using reg = __m512;
  using mask = __mmask16;
  static constexpr int W = 16;
  static mask tail(int n) { return n >= 16 ? (mask)0xFFFF : (mask)((1u << n) - 1); }
  static reg load(const float* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, mask m, reg v) { _mm512_mask_storeu_ps(p, m, v); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg zero() { return _mm512_setzero_ps(); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg neg_abs(reg a) { return _mm512_or_ps(a, _mm512_set1_ps(-0.0f)); }
  static reg select_neg(reg s, reg a, reg b) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_LT_OQ), b, a);
  }
  // exp(x) for x <= 0: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, then scaled by 2^n (the
  // AVX2 family's exp256_nonpos, same constants).
  static reg exp_nonpos(reg x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const reg n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    reg r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    reg p = _mm512_set1_ps(1.0f / 720);
    for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    return _mm512_scalef_ps(p, n);
  }
  static float hsum(reg a) { return _mm512_reduce_add_ps(a); }
};

}  // namespace

#include "kernels/kda_vec.inc"

const KdaKernels& kda_kernels_avx512() {
  static const KdaKernels k{"avx512", &recurrent_v, &conv_silu_v, &l2norm_v};
  return k;
}

}  // namespace ouro
