// The ZeRO-1/2 split (executor/zero_layout.h): buckets in backward order within
// the bucket size, equal chunks per rank, and every element of every parameter
// owned by exactly one rank at one place of its partition.
#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "executor/zero_layout.h"

namespace headroom::executor {
namespace {

// Element -> (rank, partition index): each parameter element must appear once.
void check_tiling(const std::vector<int64_t>& elements, int64_t bucket, int world) {
  std::vector<std::vector<int>> owner(elements.size());
  for (size_t i = 0; i < elements.size(); ++i) owner[i].assign(static_cast<size_t>(elements[i]), -1);
  int64_t partition = -1;
  for (int rank = 0; rank < world; ++rank) {
    const ZeroLayout layout(elements, bucket, world, rank);
    if (partition >= 0) CHECK(layout.partition_elements() == partition);
    partition = layout.partition_elements();
    std::vector<char> used(static_cast<size_t>(partition), 0);
    for (size_t i = 0; i < elements.size(); ++i) {
      const OwnedSlice s = layout.owned(i, rank);
      for (int64_t e = 0; e < s.elements; ++e) {
        int& who = owner[i][static_cast<size_t>(s.parameter_begin + e)];
        CHECK(who == -1);
        who = rank;
        char& slot = used[static_cast<size_t>(s.partition_begin + e)];
        CHECK(slot == 0);
        slot = 1;
      }
    }
  }
  for (const auto& parameter : owner) {
    for (int who : parameter) CHECK(who >= 0);
  }
}

}  // namespace

TEST_CASE("ZeRO buckets follow backward order and the bucket size, with one chunk per rank") {
  // Registration order a(6) b(10) c(3) d(25): backward yields d, c, b, a.
  const ZeroLayout layout({6, 10, 3, 25}, 16, 4, 1);
  REQUIRE(layout.buckets().size() == 3);
  CHECK(layout.buckets()[0].parameters == std::vector<size_t>{3});  // d alone: larger than a bucket
  CHECK(layout.buckets()[1].parameters == std::vector<size_t>{2, 1});  // c + b = 13 <= 16
  CHECK(layout.buckets()[2].parameters == std::vector<size_t>{0});
  CHECK(layout.buckets()[0].chunk == 7);  // ceil(25 / 4)
  CHECK(layout.buckets()[1].chunk == 4);  // ceil(13 / 4)
  CHECK(layout.buckets()[2].chunk == 2);
  CHECK(layout.partition_elements() == 13);
  CHECK(layout.buckets()[1].partition_offset == 7);
  CHECK(layout.offset_in_bucket(1) == 3);  // b after c
  // Rank 1's chunk of bucket 1 is bucket elements [4, 8): b's elements 1..4.
  const OwnedSlice b = layout.owned(1, 1);
  CHECK(b.parameter_begin == 1);
  CHECK(b.elements == 4);
  CHECK(b.partition_begin == 7);
  CHECK(layout.owned(2, 1).elements == 0);  // c sits in rank 0's chunk only
}

TEST_CASE("every element of every parameter has exactly one owner") {
  check_tiling({6, 10, 3, 25}, 16, 4);
  check_tiling({1, 1, 1}, 1000, 2);  // fewer elements than ranks in the bucket: padding
  check_tiling({7, 9, 11, 13, 1}, 9, 3);
  check_tiling({5}, 2, 1);
}

TEST_CASE("a layout is refused for a rank outside the world") {
  CHECK_THROWS(ZeroLayout({4}, 10, 2, 2));
  CHECK_THROWS(ZeroLayout({4}, 0, 2, 0));
}

}  // namespace headroom::executor
