// Helpers the analyses share (analyze*.cpp); not part of the trace API.
#pragma once

namespace ouro::analysis {

constexpr double kUsPerS = 1e6;
inline double us_to_s(double us) { return us / kUsPerS; }
// bytes / microseconds -> GB/s (1e9 bytes/s); flops / microseconds -> GFLOP/s.
inline double per_us_to_giga(double amount, double us) { return amount / us / 1e3; }

}  // namespace ouro::analysis
