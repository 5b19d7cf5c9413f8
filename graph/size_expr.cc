#include "graph/size_expr.h"

#include <cassert>
#include <numeric>
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
  if (per > 1) return total / per + (total % per > 0 ? 1 : 0);
  return total;
}

int64_t SizeExpr::at(int64_t batch, int64_t seq) const {
  const auto value = eval(batch, seq);
  assert(value.has_value() && "SizeExpr overflow on validated input");
  return value.value_or(0);
}

namespace {

// Divides the coefficients and `per` by their common divisor (3/6 -> 1/2), so
// that equal shares compare equal.
SizeExpr reduced(SizeExpr e) {
  if (e.per <= 1) return e;
  int64_t g = e.per;
  for (int64_t v : {e.c, e.b, e.s, e.bs, e.ss, e.bss}) g = std::gcd(g, v);
  if (g <= 1) return e;
  return SizeExpr{e.c / g, e.b / g, e.s / g, e.bs / g, e.ss / g, e.bss / g, e.per / g};
}

}  // namespace

SizeExpr SizeExpr::share(int64_t divisor) const {
  assert(divisor > 0);
  SizeExpr out = *this;
  [[maybe_unused]] const bool overflow = __builtin_mul_overflow(per, divisor, &out.per);
  assert(!overflow && "SizeExpr::share overflow");
  return reduced(out);
}

SizeExpr& SizeExpr::operator+=(const SizeExpr& other) {
  if (per != other.per) {
    // a/p + b/q = (a*(l/p) + b*(l/q)) / l with l = lcm(p, q), then reduced.
    const int64_t l = std::lcm(per, other.per);
    SizeExpr left = *this;
    SizeExpr right = other;
    left.per = right.per = 1;
    left = left.scaled(l / per);
    right = right.scaled(l / other.per);
    left += right;
    left.per = l;
    *this = reduced(left);
    return *this;
  }
  c += other.c;
  b += other.b;
  s += other.s;
  bs += other.bs;
  ss += other.ss;
  bss += other.bss;
  if (per > 1) *this = reduced(*this);
  return *this;
}

SizeExpr SizeExpr::divided_up(int64_t divisor) const {
  assert(divisor > 0);
  const auto up = [divisor](int64_t v) { return v / divisor + (v % divisor > 0 ? 1 : 0); };
  return SizeExpr{up(c), up(b), up(s), up(bs), up(ss), up(bss), per};
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
  out.per = per;
  return reduced(out);
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
  if (out.empty()) return "0";
  if (per > 1) return "(" + out + ")/" + std::to_string(per);
  return out;
}

}  // namespace headroom::graph
