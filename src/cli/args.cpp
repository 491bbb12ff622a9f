#include "cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ouro {

Status Args::parse(int argc, char** argv, const std::vector<std::string>& value_flags,
                   const std::vector<std::string>& bool_flags) {
  auto is = [](const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit((unsigned char)a[1]) || a[1] == '.'))) {
      std::string value;
      bool inline_value = false;
      if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inline_value = true;
      }
      if (is(value_flags, a)) {
        if (!inline_value) {
          if (i + 1 >= argc) return usage_error("flag " + a + " needs a value");
          value = argv[++i];
        }
        values_[a] = value;
      } else if (is(bool_flags, a)) {
        if (inline_value) return usage_error("flag " + a + " takes no value");
        bools_[a] = true;
      } else {
        return usage_error("unknown flag '" + a + "' (see --help)");
      }
    } else {
      pos_.push_back(a);
    }
  }
  return Ok{};
}

std::string Args::str(const std::string& f, const std::string& def) const {
  auto it = values_.find(f);
  return it == values_.end() ? def : it->second;
}

Expected<long long> Args::integer(const std::string& f, long long def, long long lo, long long hi) const {
  auto it = values_.find(f);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    return usage_error("flag " + f + ": '" + s + "' is not an integer");
  if (v < lo || v > hi)
    return usage_error("flag " + f + ": " + s + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

Expected<double> Args::number(const std::string& f, double def, double lo, double hi) const {
  auto it = values_.find(f);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    return usage_error("flag " + f + ": '" + s + "' is not a number");
  if (v < lo || v > hi)
    return usage_error("flag " + f + ": " + s + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace ouro
