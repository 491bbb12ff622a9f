// Acceptance criteria: small expressions over baseline/candidate figures and correctness results,
// e.g. `candidate.prefill_tok_s >= 0.95 * baseline.prefill_tok_s and correctness.top1_agreement == 1`.
// Grammar (docs/lab.md): or/and/not (also || && !), comparisons < <= > >= == !=, + - * /, unary -,
// parentheses, numbers (1e-3), abs(x), min(x, y), max(x, y), and dotted names. Parsed once, before
// anything runs; names are checked against what the experiment can measure.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro::lab {

struct Expr {
  enum class Kind { kNumber, kName, kUnary, kBinary, kCall } kind = Kind::kNumber;
  double number = 0;
  std::string text;  // name, operator ("-", "not", "+", ">=", "and", ...) or function name
  std::vector<std::unique_ptr<Expr>> args;
  bool is_bool() const;  // a comparison or logical operator at the top
};

// Parses; errors name the position and the token ("at column 12: expected a number or a name, got ')'").
Expected<std::unique_ptr<Expr>> parse_expr(const std::string& text);
// Every dotted name in the expression, in order of appearance (duplicates kept out).
std::vector<std::string> expr_names(const Expr& e);
// Evaluates with `lookup` for names. Comparisons and logic give 1 or 0. Division by zero gives
// +-inf or NaN (a comparison with NaN is false).
double eval_expr(const Expr& e, const std::function<double(const std::string&)>& lookup);
// For a top-level comparison: its two sides (nullptr otherwise).
const Expr* comparison_lhs(const Expr& e);
const Expr* comparison_rhs(const Expr& e);
std::string to_string(const Expr& e);

}  // namespace ouro::lab
