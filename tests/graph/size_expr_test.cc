#include "graph/size_expr.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "graph/graph_json.h"

namespace headroom::graph {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST_CASE("SizeExpr::eval sums every term") {
  const SizeExpr expr{1, 2, 3, 4, 5, 6};
  // 1 + 2*2 + 3*3 + 4*2*3 + 5*3^2 + 6*2*3^2 = 1 + 4 + 9 + 24 + 45 + 108.
  CHECK(expr.eval(2, 3) == 191);
  CHECK(expr.at(2, 3) == 191);
  CHECK(SizeExpr{}.eval(7, 9) == 0);
  CHECK(SizeExpr::constant(42).eval(0, 0) == 42);
}

TEST_CASE("SizeExpr named constructors") {
  CHECK(SizeExpr::per_token(4096) == SizeExpr{0, 0, 0, 4096, 0, 0});
  CHECK(SizeExpr::per_token(4096).at(2, 512) == 4096 * 2 * 512);
  CHECK(SizeExpr::per_sample(10).at(3, 999) == 30);
}

TEST_CASE("SizeExpr::eval reports overflow instead of wrapping") {
  SUBCASE("coefficient times variable") { CHECK_FALSE(SizeExpr{0, kMax, 0, 0, 0, 0}.eval(2, 1)); }
  SUBCASE("sum of terms") { CHECK_FALSE(SizeExpr{kMax, 1, 0, 0, 0, 0}.eval(1, 1)); }
  SUBCASE("S squared") { CHECK_FALSE(SizeExpr{0, 0, 0, 0, 1, 0}.eval(1, int64_t{1} << 32)); }
  SUBCASE("B*S^2 even with a zero coefficient") {
    // The monomials are formed before the coefficients multiply them.
    CHECK_FALSE(SizeExpr::constant(1).eval(int64_t{1} << 20, int64_t{1} << 22));
  }
  SUBCASE("huge attention-score term") {
    CHECK_FALSE(SizeExpr{0, 0, 0, 0, 0, int64_t{1} << 40}.eval(1024, 1024));
  }
  SUBCASE("largest value that fits") { CHECK(SizeExpr::constant(kMax).eval(1, 1) == kMax); }
}

TEST_CASE("SizeExpr::eval rejects negative inputs and results") {
  CHECK_FALSE(SizeExpr::per_token(1).eval(-1, 4));
  CHECK_FALSE(SizeExpr::per_token(1).eval(4, -1));
  CHECK_FALSE(SizeExpr::constant(-5).eval(1, 1));
  // A negative coefficient outweighed by a positive one still evaluates.
  CHECK(SizeExpr{-5, 10, 0, 0, 0, 0}.eval(1, 1) == 5);
}

TEST_CASE("SizeExpr::to_string") {
  CHECK(SizeExpr{}.to_string() == "0");
  CHECK(SizeExpr::constant(7).to_string() == "7");
  CHECK(SizeExpr{0, 0, 0, 4096, 0, 32}.to_string() == "4096*B*S + 32*B*S^2");
  CHECK(SizeExpr{1, 2, 3, 4, 5, 6}.to_string() == "1 + 2*B + 3*S + 4*B*S + 5*S^2 + 6*B*S^2");
  CHECK(SizeExpr{0, 0, -3, 0, 0, 0}.to_string() == "-3*S");
}

TEST_CASE("SizeExpr arithmetic and predicates") {
  SizeExpr a{1, 2, 3, 4, 5, 6};
  a += SizeExpr{1, 1, 1, 1, 1, 1};
  CHECK(a == SizeExpr{2, 3, 4, 5, 6, 7});
  CHECK(SizeExpr::per_token(3) + SizeExpr::constant(1) == SizeExpr{1, 0, 0, 3, 0, 0});
  CHECK(SizeExpr{1, 2, 3, 4, 5, 6}.scaled(2) == SizeExpr{2, 4, 6, 8, 10, 12});
  // Each coefficient rounded up: a share is never priced below its exact value.
  CHECK(SizeExpr{0, 1, 8, 9, 16, 128256}.divided_up(8) == SizeExpr{0, 1, 1, 2, 2, 16032});
  CHECK(SizeExpr{}.is_zero());
  CHECK_FALSE(SizeExpr::constant(1).is_zero());
  CHECK(SizeExpr{0, 0, 0, 0, -1, 0}.any_negative());
  CHECK_FALSE(SizeExpr{1, 2, 3, 4, 5, 6}.any_negative());
}

}  // namespace
// A share (per > 1): one of E experts' balanced rows, B*S*k/E (models/moe_loop.cc).
TEST_CASE("SizeExpr::share is exact until evaluated, then rounded up") {
  const SizeExpr rows = SizeExpr::per_token(4).share(60);  // Qwen1.5-MoE: k 4 of 60 experts
  CHECK(rows.per == 15);  // 4/60 reduced to 1/15
  CHECK(rows.bs == 1);
  CHECK(rows.at(1, 512) == 35);      // ceil(512 / 15)
  CHECK(rows.at(1, 1500) == 100);    // exact
  CHECK(rows.scaled(2048).at(1, 512) == (512 * 2048 + 14) / 15);  // scaled before rounding
  CHECK(SizeExpr::per_token(2).share(8) == SizeExpr::per_token(1).share(4));
  CHECK(rows.to_string() == "(1*B*S)/15");
  // Sums of shares keep the exact value: 15 experts' shares are the whole.
  SizeExpr total;
  for (int j = 0; j < 15; ++j) total += rows;
  CHECK(total == SizeExpr::per_token(1));
  CHECK((rows + SizeExpr::constant(1)).at(1, 1500) == 101);
}

TEST_CASE("a share round-trips through the graph JSON and a bad divisor is refused") {
  const SizeExpr rows = SizeExpr::per_token(2).share(8);
  const Result<SizeExpr> back = size_expr_from_json(size_expr_to_json(rows), "t");
  REQUIRE(back.is_ok());
  CHECK(back.value() == rows);
  CHECK(size_expr_to_json(rows).at("per") == 4);
  const Result<SizeExpr> bad = size_expr_from_json(nlohmann::json{{"bs", 1}, {"per", 0}}, "tensors[0].elements");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find("tensors[0].elements.per") != std::string::npos);
}

}  // namespace headroom::graph
