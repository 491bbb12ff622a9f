#include "lab/expr.h"

// GCC 12 reports a false maybe-uninitialized inside std::variant when Expected<unique_ptr<Expr>>
// is moved through the parser's recursion (the Error alternative's string); clang and ASan agree
// there is nothing uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace ouro::lab {

namespace {

bool is_comparison(const std::string& op) {
  return op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=";
}

struct Token {
  enum Type { kEnd, kNumber, kName, kOp, kLParen, kRParen, kComma } type = kEnd;
  std::string text;
  double number = 0;
  size_t col = 0;  // 1-based
};

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Expected<std::unique_ptr<Expr>> parse() {
    if (Status st = tokenize(); !st) return st.error();
    auto e = parse_or();
    if (!e) return e;
    if (tok().type != Token::kEnd) return fail("unexpected '" + tok().text + "' after a complete expression");
    return e;
  }

 private:
  const std::string& s_;
  std::vector<Token> toks_;
  size_t i_ = 0;

  const Token& tok() const { return toks_[i_]; }
  Error fail(const std::string& why) const {
    return usage_error("at column " + std::to_string(tok().col) + ": " + why);
  }

  Status tokenize() {
    size_t i = 0;
    while (i < s_.size()) {
      const char c = s_[i];
      if (std::isspace((unsigned char)c)) { ++i; continue; }
      Token t;
      t.col = i + 1;
      if (std::isdigit((unsigned char)c) || (c == '.' && i + 1 < s_.size() && std::isdigit((unsigned char)s_[i + 1]))) {
        const char* b = s_.c_str() + i;
        char* e = nullptr;
        t.number = std::strtod(b, &e);
        if (e == b || !std::isfinite(t.number))
          return usage_error("at column " + std::to_string(t.col) + ": bad number");
        t.type = Token::kNumber;
        t.text = std::string(b, (const char*)e);
        i += e - b;
        if (i < s_.size() && (std::isalpha((unsigned char)s_[i]) || s_[i] == '_'))
          return usage_error("at column " + std::to_string(i + 1) + ": a name cannot start right after a number");
      } else if (std::isalpha((unsigned char)c) || c == '_') {
        size_t j = i;
        while (j < s_.size() && (std::isalnum((unsigned char)s_[j]) || s_[j] == '_' || s_[j] == '.')) ++j;
        t.text = s_.substr(i, j - i);
        if (t.text.back() == '.' || t.text.find("..") != std::string::npos)
          return usage_error("at column " + std::to_string(t.col) + ": malformed name '" + t.text + "'");
        t.type = (t.text == "and" || t.text == "or" || t.text == "not") ? Token::kOp : Token::kName;
        i = j;
      } else if (c == '(' || c == ')' || c == ',') {
        t.type = c == '(' ? Token::kLParen : c == ')' ? Token::kRParen : Token::kComma;
        t.text = std::string(1, c);
        ++i;
      } else {
        static const char* ops[] = {"<=", ">=", "==", "!=", "&&", "||", "<", ">", "+", "-", "*", "/", "!"};
        bool found = false;
        for (const char* op : ops) {
          const size_t n = std::char_traits<char>::length(op);
          if (s_.compare(i, n, op) == 0) {
            t.type = Token::kOp;
            t.text = op;
            if (t.text == "&&") t.text = "and";
            if (t.text == "||") t.text = "or";
            if (t.text == "!") t.text = "not";
            i += n;
            found = true;
            break;
          }
        }
        if (!found) {
          if (c == '=')
            return usage_error("at column " + std::to_string(t.col) + ": '=' is not a comparison (use '==')");
          return usage_error("at column " + std::to_string(t.col) + ": unexpected character '" + std::string(1, c) + "'");
        }
      }
      toks_.push_back(std::move(t));
    }
    Token end;
    end.col = s_.size() + 1;
    end.text = "end of expression";
    toks_.push_back(end);
    return Ok{};
  }

  bool accept_op(const char* op) {
    if (tok().type == Token::kOp && tok().text == op) { ++i_; return true; }
    return false;
  }
  static std::unique_ptr<Expr> node(Expr::Kind k, std::string text) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->text = std::move(text);
    return e;
  }
  static std::unique_ptr<Expr> binary(std::string op, std::unique_ptr<Expr> a, std::unique_ptr<Expr> b) {
    auto e = node(Expr::Kind::kBinary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  Expected<std::unique_ptr<Expr>> parse_or() {
    auto a = parse_and();
    if (!a) return a;
    while (accept_op("or")) {
      auto b = parse_and();
      if (!b) return b;
      a = binary("or", std::move(*a), std::move(*b));
    }
    return a;
  }
  Expected<std::unique_ptr<Expr>> parse_and() {
    auto a = parse_not();
    if (!a) return a;
    while (accept_op("and")) {
      auto b = parse_not();
      if (!b) return b;
      a = binary("and", std::move(*a), std::move(*b));
    }
    return a;
  }
  Expected<std::unique_ptr<Expr>> parse_not() {
    if (accept_op("not")) {
      auto a = parse_not();
      if (!a) return a;
      auto e = node(Expr::Kind::kUnary, "not");
      e->args.push_back(std::move(*a));
      return e;
    }
    return parse_cmp();
  }
  Expected<std::unique_ptr<Expr>> parse_cmp() {
    auto a = parse_sum();
    if (!a) return a;
    if (tok().type == Token::kOp && is_comparison(tok().text)) {
      std::string op = tok().text;
      ++i_;
      auto b = parse_sum();
      if (!b) return b;
      if (tok().type == Token::kOp && is_comparison(tok().text))
        return fail("chained comparisons are ambiguous: combine them with 'and'");
      return binary(op, std::move(*a), std::move(*b));
    }
    return a;
  }
  Expected<std::unique_ptr<Expr>> parse_sum() {
    auto a = parse_prod();
    if (!a) return a;
    while (tok().type == Token::kOp && (tok().text == "+" || tok().text == "-")) {
      std::string op = tok().text;
      ++i_;
      auto b = parse_prod();
      if (!b) return b;
      a = binary(op, std::move(*a), std::move(*b));
    }
    return a;
  }
  Expected<std::unique_ptr<Expr>> parse_prod() {
    auto a = parse_unary();
    if (!a) return a;
    while (tok().type == Token::kOp && (tok().text == "*" || tok().text == "/")) {
      std::string op = tok().text;
      ++i_;
      auto b = parse_unary();
      if (!b) return b;
      a = binary(op, std::move(*a), std::move(*b));
    }
    return a;
  }
  Expected<std::unique_ptr<Expr>> parse_unary() {
    if (accept_op("-")) {
      auto a = parse_unary();
      if (!a) return a;
      auto e = node(Expr::Kind::kUnary, "-");
      e->args.push_back(std::move(*a));
      return e;
    }
    return parse_primary();
  }
  Expected<std::unique_ptr<Expr>> parse_primary() {
    const Token t = tok();
    if (t.type == Token::kNumber) {
      ++i_;
      auto e = node(Expr::Kind::kNumber, t.text);
      e->number = t.number;
      return e;
    }
    if (t.type == Token::kLParen) {
      ++i_;
      auto e = parse_or();
      if (!e) return e;
      if (tok().type != Token::kRParen) return fail("expected ')', got '" + tok().text + "'");
      ++i_;
      return e;
    }
    if (t.type == Token::kName) {
      ++i_;
      if (tok().type != Token::kLParen) return node(Expr::Kind::kName, t.text);
      const int arity = t.text == "abs" ? 1 : (t.text == "min" || t.text == "max") ? 2 : -1;
      if (arity < 0) {
        --i_;
        return fail("unknown function '" + t.text + "' (known: abs, min, max)");
      }
      ++i_;
      auto e = node(Expr::Kind::kCall, t.text);
      for (int k = 0; k < arity; ++k) {
        if (k > 0) {
          if (tok().type != Token::kComma) return fail(t.text + "() takes " + std::to_string(arity) + " arguments");
          ++i_;
        }
        auto a = parse_sum();
        if (!a) return a;
        e->args.push_back(std::move(*a));
      }
      if (tok().type != Token::kRParen) return fail("expected ')' to close " + t.text + "(");
      ++i_;
      return e;
    }
    return fail("expected a number or a name, got '" + t.text + "'");
  }
};

void collect_names(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == Expr::Kind::kName) {
    for (const auto& n : out)
      if (n == e.text) return;
    out.push_back(e.text);
  }
  for (const auto& a : e.args) collect_names(*a, out);
}

}  // namespace

bool Expr::is_bool() const {
  if (kind == Kind::kUnary) return text == "not";
  if (kind == Kind::kBinary) return text == "and" || text == "or" || is_comparison(text);
  return false;
}

Expected<std::unique_ptr<Expr>> parse_expr(const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return usage_error("empty expression");
  if (text.size() > 4096) return usage_error("expression longer than 4096 characters");
  return Parser(text).parse();
}

std::vector<std::string> expr_names(const Expr& e) {
  std::vector<std::string> out;
  collect_names(e, out);
  return out;
}

double eval_expr(const Expr& e, const std::function<double(const std::string&)>& lookup) {
  switch (e.kind) {
    case Expr::Kind::kNumber: return e.number;
    case Expr::Kind::kName: return lookup(e.text);
    case Expr::Kind::kUnary: {
      const double a = eval_expr(*e.args[0], lookup);
      return e.text == "-" ? -a : (a != 0 && !std::isnan(a) ? 0.0 : 1.0);
    }
    case Expr::Kind::kCall: {
      const double a = eval_expr(*e.args[0], lookup);
      if (e.text == "abs") return std::fabs(a);
      const double b = eval_expr(*e.args[1], lookup);
      if (std::isnan(a) || std::isnan(b)) return NAN;
      return e.text == "min" ? std::min(a, b) : std::max(a, b);
    }
    case Expr::Kind::kBinary: break;
  }
  const std::string& op = e.text;
  const double a = eval_expr(*e.args[0], lookup);
  if (op == "and" && !(a != 0 && !std::isnan(a))) return 0;
  if (op == "or" && a != 0 && !std::isnan(a)) return 1;
  const double b = eval_expr(*e.args[1], lookup);
  if (op == "and" || op == "or") return b != 0 && !std::isnan(b) ? 1 : 0;
  if (op == "+") return a + b;
  if (op == "-") return a - b;
  if (op == "*") return a * b;
  if (op == "/") return a / b;
  if (op == "<") return a < b;
  if (op == "<=") return a <= b;
  if (op == ">") return a > b;
  if (op == ">=") return a >= b;
  if (op == "==") return a == b;
  if (op == "!=") return a != b && !std::isnan(a) && !std::isnan(b);
  return NAN;
}

const Expr* comparison_lhs(const Expr& e) {
  return e.kind == Expr::Kind::kBinary && is_comparison(e.text) ? e.args[0].get() : nullptr;
}
const Expr* comparison_rhs(const Expr& e) {
  return e.kind == Expr::Kind::kBinary && is_comparison(e.text) ? e.args[1].get() : nullptr;
}

std::string to_string(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kNumber: return e.text;
    case Expr::Kind::kName: return e.text;
    case Expr::Kind::kUnary: return e.text == "-" ? "-" + to_string(*e.args[0]) : "not " + to_string(*e.args[0]);
    case Expr::Kind::kCall: {
      std::string s = e.text + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + to_string(*e.args[i]);
      return s + ")";
    }
    case Expr::Kind::kBinary: break;
  }
  return "(" + to_string(*e.args[0]) + " " + e.text + " " + to_string(*e.args[1]) + ")";
}

}  // namespace ouro::lab
