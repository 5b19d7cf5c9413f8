// How ZeRO stages 1 and 2 split the trainable parameters among the ranks of a
// data-parallel job (issue 11). Torch-free.
//
// The parameters are taken in reverse registration order, the order backward
// produces their gradients, and packed into buckets of at most
// `bucket_elements` (DeepSpeed's reduce_bucket_size; a parameter larger than a
// bucket gets one of its own). Each bucket is a flat run of its parameters,
// padded to a multiple of the world size and cut into one equal chunk per
// rank, so a bucket's gradients reach their owners with one reduce-scatter and
// the updated chunks return with one all-gather. A rank's partition (its fp32
// master weights, optimizer states and, at stage 2, gradients) is its chunk of
// every bucket, in bucket order: ceil(bucket / world) elements each, the
// planner's ceil_div(bytes, world) (planner/memory/model_states.cc) up to the padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace headroom::executor {

struct ZeroBucket {
  std::vector<std::size_t> parameters;  // indices into the parameter list, in bucket order
  std::vector<int64_t> offsets;    // where each starts in the bucket
  int64_t elements = 0;            // sum of the parameters' elements (no padding)
  int64_t chunk = 0;               // elements per rank: ceil(elements / world)
  int64_t partition_offset = 0;    // where this bucket's chunk starts in a rank's partition
};

// One parameter's elements that fall in a rank's chunk of its bucket.
struct OwnedSlice {
  int64_t parameter_begin = 0;  // first element, in the flattened parameter
  int64_t partition_begin = 0;  // where it sits in the rank's partition
  int64_t elements = 0;         // 0: the rank owns none of this parameter
};

class ZeroLayout {
 public:
  // `elements`: each trainable parameter's element count, in registration
  // order. world >= 1, 0 <= rank < world, bucket_elements >= 1.
  ZeroLayout(const std::vector<int64_t>& elements, int64_t bucket_elements, int world, int rank);

  int world() const { return world_; }
  int rank() const { return rank_; }
  const std::vector<ZeroBucket>& buckets() const { return buckets_; }
  std::size_t bucket_of(std::size_t parameter) const { return bucket_of_[parameter]; }
  int64_t offset_in_bucket(std::size_t parameter) const { return offset_[parameter]; }
  // Elements of every rank's partition (the same on every rank).
  int64_t partition_elements() const { return partition_elements_; }
  // The part of `parameter` in `rank`'s chunk of its bucket.
  OwnedSlice owned(std::size_t parameter, int rank) const;

 private:
  int world_;
  int rank_;
  std::vector<int64_t> elements_;
  std::vector<ZeroBucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<int64_t> offset_;
  int64_t partition_elements_ = 0;
};

}  // namespace headroom::executor
