// The KDA family for AVX2 (kernels/kda.h): kda_vec.inc over 8-float registers; tails through
// vmaskmov.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/kda.h"
#include "kernels/simd_avx2.h"

namespace ouro {

namespace {

struct V {
  using reg = __m256;
  using mask = __m256i;
  static constexpr int W = 8;
  static mask tail(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg load(const float* p, mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, mask m, reg v) { _mm256_maskstore_ps(p, m, v); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg zero() { return _mm256_setzero_ps(); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg neg_abs(reg a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
  // a where s < 0, else b.
  static reg select_neg(reg s, reg a, reg b) { return _mm256_blendv_ps(b, a, s); }
  static reg exp_nonpos(reg a) { return exp256_nonpos(a); }
  static float hsum(reg a) { return hsum256(a); }
};

}  // namespace

#include "kernels/kda_vec.inc"

const KdaKernels& kda_kernels_avx2() {
  static const KdaKernels k{"avx2", &recurrent_v, &conv_silu_v, &l2norm_v};
  return k;
}

}  // namespace ouro
