// SizeExpr: an element count, byte count or FLOP count that depends on the
// micro-batch B and the sequence length S (tokens; image models turn their
// resolution into tokens). It is the polynomial
//   c + b*B + s*S + bs*B*S + ss*S^2 + bss*B*S^2
// which covers every activation of a transformer: per-token tensors (bs),
// eager attention scores (bss), fixed-length side inputs such as Flux's 512 text
// tokens (b), and parameters (c). `per` > 1 makes it a share of that polynomial,
// rounded up: the rows one of E experts receives under balanced routing are
// B*S*k/E (models/moe_loop.cc), which integer coefficients cannot hold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace headroom::graph {

struct SizeExpr {
  int64_t c = 0;
  int64_t b = 0;
  int64_t s = 0;
  int64_t bs = 0;
  int64_t ss = 0;
  int64_t bss = 0;
  int64_t per = 1;  // the value is ceil(polynomial / per); always >= 1

  static SizeExpr constant(int64_t value) { return SizeExpr{value, 0, 0, 0, 0, 0}; }
  // per_token * B * S: the size of a [B, S, per_token] tensor.
  static SizeExpr per_token(int64_t per_token) { return SizeExpr{0, 0, 0, per_token, 0, 0}; }
  // per_sample * B: the size of a [B, per_sample] tensor.
  static SizeExpr per_sample(int64_t per_sample) { return SizeExpr{0, per_sample, 0, 0, 0, 0}; }

  // Value at (batch, seq), ceil(polynomial / per); nullopt if it overflows int64 or is negative.
  std::optional<int64_t> eval(int64_t batch, int64_t seq) const;
  // Same, for callers that have validated the expression and inputs; asserts.
  int64_t at(int64_t batch, int64_t seq) const;

  bool is_zero() const { return c == 0 && b == 0 && s == 0 && bs == 0 && ss == 0 && bss == 0; }
  bool any_negative() const { return c < 0 || b < 0 || s < 0 || bs < 0 || ss < 0 || bss < 0; }

  SizeExpr& operator+=(const SizeExpr& other);
  friend SizeExpr operator+(SizeExpr a, const SizeExpr& other) { return a += other; }
  // Multiplies every coefficient (e.g. elements -> bytes). Asserts no overflow.
  SizeExpr scaled(int64_t factor) const;
  // Divides every coefficient by `divisor`, rounding each up, so a share of a
  // size is never priced below its exact value (a chunk of a chunked loss).
  SizeExpr divided_up(int64_t divisor) const;
  // The exact share 1/divisor of the whole expression (per *= divisor, reduced);
  // only its value is rounded up.
  SizeExpr share(int64_t divisor) const;
  bool operator==(const SizeExpr& other) const = default;

  // Human form, e.g. "4096*B*S + 32*B*S^2".
  std::string to_string() const;
};

// A polynomial in B and S whose coefficients are counts of elements that
// multiply by a per-element width given elsewhere.
using ElementsExpr = SizeExpr;

}  // namespace headroom::graph
