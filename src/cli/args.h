// A small flag parser: each subcommand declares its flags; unknown flags, missing values and bad
// numbers are usage errors (exit 2) that name the flag.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro {

class Args {
 public:
  // `value_flags` take a value; `bool_flags` do not. Names include dashes ("-p", "--model").
  Status parse(int argc, char** argv, const std::vector<std::string>& value_flags,
               const std::vector<std::string>& bool_flags);
  bool has(const std::string& f) const { return values_.count(f) || bools_.count(f); }
  std::string str(const std::string& f, const std::string& def = "") const;
  Expected<long long> integer(const std::string& f, long long def, long long lo, long long hi) const;
  Expected<double> number(const std::string& f, double def, double lo, double hi) const;
  const std::vector<std::string>& positional() const { return pos_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> bools_;
  std::vector<std::string> pos_;
};

}  // namespace ouro
