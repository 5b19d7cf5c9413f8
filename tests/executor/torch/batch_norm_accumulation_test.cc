// What the planner's note on BatchNorm under gradient accumulation says
// (planner/predict/training_notes.cc), shown with LibTorch's own BatchNorm2d: two
// micro-batches of 4 with their gradients accumulated are not one batch of 8.
// Each micro-batch is normalized with its own statistics (so the gradients
// differ) and the running statistics are updated twice with momentum 0.1
// (so they differ too); the same model without BatchNorm (GroupNorm, which
// normalizes per sample) accumulates to exactly the large batch's gradient.
#include <doctest/doctest.h>
#include <torch/torch.h>

// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace {

struct Result {
  torch::Tensor grad;           // of the convolution's weight
  torch::Tensor running_mean;   // BatchNorm only
};

// conv -> norm -> a regression onto fixed targets; `micro` samples per
// backward, gradients summed as a training loop with accumulation sums them
// (each micro-batch's mean loss scaled by micro / total).
Result train_step(bool batch_norm, const torch::Tensor& images, const torch::Tensor& targets, int64_t micro) {
  torch::manual_seed(0);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3).padding(1));
  torch::nn::BatchNorm2d bn(8);
  torch::nn::GroupNorm gn(torch::nn::GroupNormOptions(2, 8));
  const int64_t total = images.size(0);
  for (int64_t first = 0; first < total; first += micro) {
    const torch::Tensor x = images.narrow(0, first, micro);
    const torch::Tensor h = conv(x);
    const torch::Tensor y = batch_norm ? bn(h) : gn(h);
    ((y - targets.narrow(0, first, micro)).pow(2).mean() * (static_cast<double>(micro) / total)).backward();
  }
  return {conv->weight.grad().clone(), bn->running_mean.clone()};
}

// float64 modules and data for the test, float32 again after it.
struct DoubleDefault {
  DoubleDefault() { torch::set_default_dtype(caffe2::TypeMeta::Make<double>()); }
  ~DoubleDefault() { torch::set_default_dtype(caffe2::TypeMeta::Make<float>()); }
};

TEST_CASE("BatchNorm: accumulating micro-batches is not the large batch, GroupNorm is") {
  const DoubleDefault doubles;
  torch::manual_seed(1);
  // Two halves with different statistics, as two micro-batches of real data may have.
  const torch::Tensor images = torch::cat({torch::randn({4, 3, 8, 8}), torch::randn({4, 3, 8, 8}) * 3 + 1});
  const torch::Tensor targets = torch::randn({8, 8, 8, 8});
  const Result large = train_step(true, images, targets, 8);
  const Result accumulated = train_step(true, images, targets, 4);
  CHECK((large.grad - accumulated.grad).abs().max().item<double>() > 1e-3);  // the gradients differ
  CHECK((large.running_mean - accumulated.running_mean).abs().max().item<double>() > 1e-3);  // and the statistics
  // GroupNorm normalizes each sample alone: accumulation is exact up to float64 rounding.
  const Result group_large = train_step(false, images, targets, 8);
  const Result group_accumulated = train_step(false, images, targets, 4);
  CHECK((group_large.grad - group_accumulated.grad).abs().max().item<double>() < 1e-12);
  CHECK((group_large.grad.abs().max().item<double>() > 1e-3));  // a gradient there is to compare
}

}  // namespace
