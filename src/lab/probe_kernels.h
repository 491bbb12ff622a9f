// The probe's peak-compute loops (internal to lab/probe*.cpp). Each runs `iters` iterations of
// independent dependency chains (enough of them to hide the instruction's latency on current
// cores) and returns a value derived from the accumulators, so the work cannot be dropped.
#pragma once

namespace ouro::probe_detail {

constexpr int kFmaChains = 12;      // FP32 FMA accumulators (fits the 16 ymm registers of AVX2)
constexpr int kDotChains = 12;      // BF16 / VNNI accumulators (AVX-512: 32 zmm registers)
constexpr int kMaddubsChains = 8;   // AVX2 INT8 chains (each needs two temporaries)

// Operations per iteration, counted as 2 per multiply-add lane.
constexpr double kFp32Avx512Flops = kFmaChains * 16 * 2.0;
constexpr double kFp32Avx2Flops = kFmaChains * 8 * 2.0;
constexpr double kBf16Avx512Flops = kDotChains * 32 * 2.0;     // 16 lanes x 2 bf16 pairs
constexpr double kInt8VnniOps = kDotChains * 64 * 2.0;         // 64 u8 x s8 products
constexpr double kInt8Avx2Ops = kMaddubsChains * 32 * 2.0;     // 32 u8 x s8 products

// probe_avx512.cpp (AVX-512F / AVX512_BF16 / AVX512_VNNI).
float fp32_fma_avx512(long iters);
float bf16_dot_avx512(long iters);
int int8_dot_avx512vnni(long iters);

}  // namespace ouro::probe_detail
