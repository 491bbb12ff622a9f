// The attention's two passes in 512-bit vectors (attend_avx512.cpp), for kernels/ops.cpp's
// attend_paged_tokens on hosts with AVX-512. Each zmm operation does, lane for lane, what two of the
// AVX2 path's ymm operations do (a dot product's two 8-lane accumulators side by side; 16 value
// columns instead of 8), in the same order, so every output bit is the AVX2 path's. Internal to
// src/kernels.
#pragma once
#include <cstdint>

#include "kernels/kv_types.h"

namespace ouro {

// For heads [0, G) and positions p0 + [0, n - n % 4) of a tile of cached rows (rows[i] the row, its
// values data_off bytes in, rs[i] its scale): scores[g * n_keys + p0 + i] = q_g . row_i *
// (rs[i] * scale), up to four heads against four rows at a time (query g at q + g * qs; n_keys is
// the stride of the heads' scores).
template <KvType T>
void score_heads_avx512(const float* q, int G, int64_t qs, const uint8_t* const* rows, int64_t data_off,
                        const float* rs, int64_t n, int hd, float scale, float* scores, int64_t n_keys, int64_t p0);

// out[h][0, hd_v) (+)= sum over the n rows of w[h * w_stride + j] * row j's first hd_v values, for
// heads h < G (G <= 4; out row h at out + h * os); first: the sums start at zero, else from out.
template <KvType T>
void weighted_heads_avx512(const uint8_t* const* rows, int64_t data_off, int64_t n, const float* w, int64_t w_stride,
                           int G, int hd_v, bool first, float* out, int64_t os);

}  // namespace ouro
