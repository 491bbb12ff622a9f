// Scalar kernels: the readable reference for the packed formats (see matmul.h for the layouts).
#include "kernels/matmul.h"

namespace ouro {
namespace {

inline int q4_value(const uint8_t* row, int64_t k) {
  const int64_t b = k / 32, i = k % 32;
  const uint8_t byte = row[(b / 2) * 32 + i];
  return (b % 2) ? (byte >> 4) : (byte & 0xf);
}

template <bool kIsQ4>
void gemm_scalar(const PackedMatrix& W, const QuantActs& A, int64_t r0, int64_t r1, float* Y, int64_t ldy) {
  for (int64_t t = 0; t < A.T; ++t) {
    const int8_t* a = A.qs.data() + t * A.cols_pad;
    const float* da = A.d.data() + t * A.nb;
    const float* sa = A.s.data() + t * A.nb;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* w = W.qrow(r);
      const float* dw = W.drow(r);
      const float* cw = W.crow(r);
      float acc = 0;
      for (int64_t b = 0; b < W.nb; ++b) {
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) {
          const int64_t k = b * 32 + i;
          // Q8 is computed signed here, so its c-term (the VNNI offset correction) is not needed.
          const int wv = kIsQ4 ? q4_value(w, k) : (int)(int8_t)(w[k] ^ 0x80);
          isum += wv * a[k];
        }
        acc += dw[b] * da[b] * (float)isum;
        if (kIsQ4) acc += cw[b] * sa[b];
      }
      Y[t * ldy + r] = acc;
    }
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_scalar() {
  static const MatmulKernels k{gemm_scalar<true>, gemm_scalar<false>};
  return k;
}

}  // namespace ouro
