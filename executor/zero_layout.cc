#include "executor/zero_layout.h"

#include <algorithm>
#include <stdexcept>

namespace headroom::executor {

ZeroLayout::ZeroLayout(const std::vector<int64_t>& elements, int64_t bucket_elements, int world, int rank)
    : world_(world), rank_(rank), elements_(elements), bucket_of_(elements.size()), offset_(elements.size()) {
  if (world < 1 || rank < 0 || rank >= world || bucket_elements < 1) {
    throw std::invalid_argument("ZeroLayout: expected world >= 1, 0 <= rank < world and a positive bucket size");
  }
  for (size_t k = elements.size(); k-- > 0;) {
    const bool fits = !buckets_.empty() && buckets_.back().elements + elements[k] <= bucket_elements;
    if (!fits) buckets_.emplace_back();
    ZeroBucket& bucket = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    offset_[k] = bucket.elements;
    bucket.parameters.push_back(k);
    bucket.offsets.push_back(bucket.elements);
    bucket.elements += elements[k];
  }
  for (ZeroBucket& bucket : buckets_) {
    bucket.chunk = (bucket.elements + world - 1) / world;
    bucket.partition_offset = partition_elements_;
    partition_elements_ += bucket.chunk;
  }
}

OwnedSlice ZeroLayout::owned(size_t parameter, int rank) const {
  const ZeroBucket& bucket = buckets_[bucket_of_[parameter]];
  const int64_t chunk_begin = rank * bucket.chunk;
  const int64_t begin = std::max(offset_[parameter], chunk_begin);
  const int64_t end = std::min(offset_[parameter] + elements_[parameter], chunk_begin + bucket.chunk);
  if (end <= begin) return OwnedSlice{};
  return OwnedSlice{begin - offset_[parameter], bucket.partition_offset + begin - chunk_begin, end - begin};
}

}  // namespace headroom::executor
