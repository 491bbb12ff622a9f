#include "lab/numfmt.h"

#include <cmath>
#include <cstdio>

namespace ouro::lab {

std::string fmt(double v, int prec) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

std::string pct(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", 100 * r);
  return b;
}

}  // namespace ouro::lab
