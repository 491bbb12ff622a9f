// Scalar kernels: the readable reference for the packed formats (see matmul.h for the layouts).
#include "kernels/matmul.h"

#include <cmath>

namespace ouro {
namespace {

void gemm_scalar(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  const bool q4 = W.kind == PackedKind::kQ4;
  for (int64_t t = 0; t < A.T; ++t) {
    const int8_t* a = A.qs.data() + t * A.cols_pad;
    const float* da = A.d.data() + t * A.nb;
    const float* sa = A.s.data() + t * A.nb;
    for (int64_t r = r0; r < r1; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < W.nb; ++b) {
        int32_t isum = 0;
        // Q8 is computed signed here, so its c-term (the VNNI offset correction) is not needed.
        for (int i = 0; i < 32; ++i) isum += W.raw(r, b * 32 + i) * a[b * 32 + i];
        // One rounding for each product and its sum, as the AVX2 and AVX-512 kernels' FMAs: the
        // results are the same bits on every ISA.
        acc = std::fma((float)isum, W.d(r, b) * da[b], acc);
        if (q4) acc = std::fma(W.c(r, b), sa[b], acc);
      }
      Y[t * ldy + r] = acc;
    }
  }
}

// W8A8: one integer dot per (token, row), scaled once.
void gemm_w8_scalar(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  for (int64_t t = 0; t < A.T; ++t) {
    const int8_t* a = A.qs.data() + t * A.cols_pad;
    for (int64_t r = r0; r < r1; ++r) {
      int32_t isum = 0;
      for (int64_t k = 0; k < W.cols; ++k) isum += W.raw(r, k) * a[k];
      Y[t * ldy + r] = (float)isum * (W.rscale[r] * A.td[t]);
    }
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_scalar() {
  static const MatmulKernels k{gemm_scalar, gemm_scalar, gemm_w8_scalar};
  return k;
}

}  // namespace ouro
