#include "graph/size_expr.h"

#include <cassert>
#include <string>

namespace headroom::graph {
namespace {

// a*b + acc without overflow; false when the result leaves int64.
bool mul_add(int64_t a, int64_t b, int64_t& acc) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return false;
  return !__builtin_add_overflow(acc, product, &acc);
}

}  // namespace

std::optional<int64_t> SizeExpr::eval(int64_t batch, int64_t seq) const {
  if (batch < 0 || seq < 0) return std::nullopt;
  int64_t seq2 = 0;
  int64_t batch_seq = 0;
  int64_t batch_seq2 = 0;
  if (__builtin_mul_overflow(seq, seq, &seq2)) return std::nullopt;
  if (__builtin_mul_overflow(batch, seq, &batch_seq)) return std::nullopt;
  if (__builtin_mul_overflow(batch_seq, seq, &batch_seq2)) return std::nullopt;
  int64_t total = c;
  if (!mul_add(b, batch, total) || !mul_add(s, seq, total) || !mul_add(bs, batch_seq, total) ||
      !mul_add(ss, seq2, total) || !mul_add(bss, batch_seq2, total)) {
    return std::nullopt;
  }
  if (total < 0) return std::nullopt;
  return total;
}

int64_t SizeExpr::at(int64_t batch, int64_t seq) const {
  const auto value = eval(batch, seq);
  assert(value.has_value() && "SizeExpr overflow on validated input");
  return value.value_or(0);
}

SizeExpr& SizeExpr::operator+=(const SizeExpr& other) {
  c += other.c;
  b += other.b;
  s += other.s;
  bs += other.bs;
  ss += other.ss;
  bss += other.bss;
  return *this;
}

SizeExpr SizeExpr::divided_up(int64_t divisor) const {
  assert(divisor > 0);
  const auto up = [divisor](int64_t v) { return v / divisor + (v % divisor > 0 ? 1 : 0); };
  return SizeExpr{up(c), up(b), up(s), up(bs), up(ss), up(bss)};
}

SizeExpr SizeExpr::scaled(int64_t factor) const {
  SizeExpr out;
  [[maybe_unused]] bool overflow = false;
  overflow |= __builtin_mul_overflow(c, factor, &out.c);
  overflow |= __builtin_mul_overflow(b, factor, &out.b);
  overflow |= __builtin_mul_overflow(s, factor, &out.s);
  overflow |= __builtin_mul_overflow(bs, factor, &out.bs);
  overflow |= __builtin_mul_overflow(ss, factor, &out.ss);
  overflow |= __builtin_mul_overflow(bss, factor, &out.bss);
  assert(!overflow && "SizeExpr::scaled overflow");
  return out;
}

std::string SizeExpr::to_string() const {
  std::string out;
  auto term = [&out](int64_t coef, const char* symbol) {
    if (coef == 0) return;
    if (!out.empty()) out += " + ";
    out += std::to_string(coef);
    if (symbol[0] != '\0') {
      out += "*";
      out += symbol;
    }
  };
  term(c, "");
  term(b, "B");
  term(s, "S");
  term(bs, "B*S");
  term(ss, "S^2");
  term(bss, "B*S^2");
  return out.empty() ? "0" : out;
}

}  // namespace headroom::graph
