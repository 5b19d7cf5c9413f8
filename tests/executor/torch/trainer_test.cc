// headroom run on the CPU: tiny-llama and tiny-flux train with checkpoint and
// offload plans, the loss falls, the memory categories the planner predicts
// match the tracking allocator's measurement, offload leaves gradients
// unchanged, and training-state checkpoints survive injected write failures
// and a full disk, with a resume that continues exactly.
#include <doctest/doctest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "executor/executable_model.h"
#include "executor/offload.h"
#include "executor/run.h"
#include "executor/state_store.h"
#include "models/llama.h"
#include "models/torch/llama_module.h"
#include "planner/predict/planner.h"
#include "tests/executor/torch/run_test_support.h"
#include "tests/executor/torch/trainer_checks.h"


// c10/util/logging defines CHECK (an abort); the tests mean doctest's.
#undef CHECK
#define CHECK DOCTEST_CHECK

namespace headroom::executor {
namespace {

namespace tm = models::torch_modules;

planner::Plan plan_for(const std::string& model, planner::Precision precision, planner::TrainMode mode,
                       planner::CheckpointPolicy checkpointing) {
  planner::RunSettings settings;
  settings.model = model;
  settings.gpu = "a6000";
  settings.precision = precision;
  settings.mode = mode;
  settings.lora.rank = 4;
  settings.checkpointing = checkpointing;
  settings.micro_batch = 4;  // a smoother loss than one sequence per step
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  return answer->as_given;
}

using Recorder = run_test::StepRecorder;
using run_test::check_categories;

const CategoryCheck* find(const RunResult& r, const std::string& name) {
  for (const CategoryCheck& c : r.categories) {
    if (c.category == name) return &c;
  }
  return nullptr;
}

std::string temp_dir(const std::string& name) {
  const std::string dir = "/tmp/headroom_trainer_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// The real file system, with writes failing on demand or little free space.
class FaultyFileSystem final : public FileSystem {
 public:
  bool fail_writes = false;
  int64_t free = -1;  // -1: the real figure
  Result<int64_t> free_bytes(const std::string& d) override {
    return free >= 0 ? Result<int64_t>(free) : real().free_bytes(d);
  }
  Status make_directory(const std::string& p) override { return real().make_directory(p); }
  Result<std::vector<std::string>> list_directory(const std::string& p) override { return real().list_directory(p); }
  bool exists(const std::string& p) override { return real().exists(p); }
  Result<int64_t> file_size(const std::string& p) override { return real().file_size(p); }
  Status write_file(const std::string& p, std::string_view c) override {
    if (fail_writes) {
      (void)real().write_file(p, c.substr(0, c.size() / 2));  // a torn write, as a crash leaves it
      return Status::io(p + ": write: Input/output error (injected)");
    }
    return real().write_file(p, c);
  }
  Result<std::string> read_file(const std::string& p) override { return real().read_file(p); }
  Status rename(const std::string& a, const std::string& b) override { return real().rename(a, b); }
  Status sync_directory(const std::string& p) override { return real().sync_directory(p); }
  Status remove_all(const std::string& p) override { return real().remove_all(p); }

 private:
  static FileSystem& real() { return real_file_system(); }
};


}  // namespace

TEST_CASE("tiny-llama trains on the CPU with a checkpoint-every plan, memory as predicted") {
  const planner::Plan plan = plan_for("tiny-llama", planner::Precision::kFp32, planner::TrainMode::kFull,
                                      planner::CheckpointPolicy::kEveryBlock);
  RunOptions options;
  options.steps = 40;
  options.learning_rate = 3e-3;
  options.device = "cpu";
  Recorder recorder;
  Result<RunResult> r = train_plan(plan, options, recorder);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  REQUIRE(recorder.steps.size() == 40);
  INFO("loss " << recorder.steps.front().loss << " -> " << recorder.steps.back().loss);
  CHECK(recorder.steps.front().loss > 5.0);  // about ln(256) = 5.55 at initialisation
  CHECK(recorder.steps.back().loss < 0.6 * recorder.steps.front().loss);
  check_categories(r.value(), {"parameters", "optimizer states + master weights", "gradients", "activations"});
}

TEST_CASE("tiny-llama, bf16 mixed precision with LoRA and dropout: master weights, adapters, masks as predicted") {
  const planner::Plan plan = plan_for("tiny-llama", planner::Precision::kBf16Mixed, planner::TrainMode::kLora,
                                      planner::CheckpointPolicy::kNone);
  RunOptions options;
  options.steps = 3;
  options.device = "cpu";
  Recorder recorder;
  Result<RunResult> r = train_plan(plan, options, recorder);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  check_categories(r.value(), {"parameters", "optimizer states + master weights", "gradients", "activations"});
}

TEST_CASE("PEFT's all-linear trains the adapters the planner's graph placed") {
  // The plan keeps the shorthand; the executor adapts the modules the graph resolved it to
  // (planner/mechanisms/peft_targets.h): without them nothing would train.
  planner::RunSettings settings;
  settings.model = "tiny-llama";
  settings.gpu = "a6000";
  settings.precision = planner::Precision::kFp32;
  settings.mode = planner::TrainMode::kLora;
  settings.lora.rank = 4;
  settings.lora.targets = {"all-linear"};
  settings.micro_batch = 2;
  Result<planner::FitAnswer> answer = planner::fit(settings);
  REQUIRE_MESSAGE(answer.is_ok(), answer.message());
  RunOptions options;
  options.steps = 2;
  options.device = "cpu";
  Recorder recorder;
  Result<RunResult> r = train_plan(answer->as_given, options, recorder);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  check_categories(r.value(), {"parameters", "optimizer states + master weights", "gradients", "activations"});
}

TEST_CASE("tiny-flux trains with LoRA and checkpointing, loss falls, memory as predicted") {
  const planner::Plan plan = plan_for("tiny-flux", planner::Precision::kFp32, planner::TrainMode::kLora,
                                      planner::CheckpointPolicy::kEveryBlock);
  RunOptions options;
  options.steps = 40;
  options.learning_rate = 1e-2;
  options.device = "cpu";
  Recorder recorder;
  Result<RunResult> r = train_plan(plan, options, recorder);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  INFO("loss " << recorder.steps.front().loss << " -> " << recorder.steps.back().loss);
  CHECK(recorder.steps.back().loss < 0.9 * recorder.steps.front().loss);
  check_categories(r.value(), {"parameters", "optimizer states + master weights", "gradients", "activations"});
}

TEST_CASE("an offload plan moves what the planner says to the host") {
  planner::Plan plan = plan_for("tiny-llama", planner::Precision::kFp32, planner::TrainMode::kFull,
                                planner::CheckpointPolicy::kNone);
  for (size_t b = 0; b + 1 < plan.blocks.size(); ++b) {
    if (plan.block_names[b].find("layers.") != std::string::npos && b % 2 == 0) {
      plan.blocks[b] = planner::BlockChoice::kOffload;
    }
  }
  RunOptions options;
  options.steps = 2;
  options.device = "cpu";
  Recorder recorder;
  Result<RunResult> r = train_plan(plan, options, recorder);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  check_categories(r.value(), {"activations", "offloaded activations"});
}

TEST_CASE("offloaded blocks give the same gradients as the plain run, and release their host copies") {
  torch::manual_seed(3);
  tm::LlamaForCausalLM model(models::kTinyLlama);
  model->to(torch::kDouble);
  const torch::Tensor ids = torch::randint(0, models::kTinyLlama.vocab, {2, 32}, torch::kLong);
  model->forward(ids).backward();
  std::vector<torch::Tensor> plain;
  for (const torch::Tensor& p : model->parameters()) plain.push_back(p.grad().clone());
  model->zero_grad();

  OffloadStats stats;
  const auto params = parameter_storages(*model);
  const tm::BlockRunner offload_all = [&](const std::string&, torch::nn::Module&, const tm::BlockFn& fn,
                                          const std::vector<torch::Tensor>& in) {
    const OffloadScope scope(stats, params);
    return fn(in);
  };
  model->forward(ids, offload_all).backward();
  CHECK(stats.packed_tensors > 0);
  CHECK(stats.packed_bytes > 0);
  CHECK(stats.host_live_bytes == 0);  // every host copy was unpacked and freed by backward
  size_t i = 0;
  for (const torch::Tensor& p : model->parameters()) {
    CHECK(torch::allclose(p.grad(), plain[i++], 1e-12, 1e-12));
  }
}

TEST_CASE("checkpoints survive a failed write and a full disk, resume continues exactly") {
  const planner::Plan plan = plan_for("tiny-llama", planner::Precision::kFp32, planner::TrainMode::kFull,
                                      planner::CheckpointPolicy::kEveryBlock);
  RunOptions base;
  base.device = "cpu";
  base.steps = 6;
  base.checkpoint_every = 2;
  base.checkpoints_kept = 3;
  base.learning_rate = 3e-3;

  // Uninterrupted.
  RunOptions straight = base;
  straight.checkpoint_dir = temp_dir("straight");
  Recorder full;
  REQUIRE(train_plan(plan, straight, full).is_ok());

  // The save at step 4 fails mid-write: the run stops, step 2 stays intact.
  FaultyFileSystem faulty;
  RunOptions broken = base;
  broken.checkpoint_dir = temp_dir("broken");
  broken.file_system = &faulty;
  struct FailAfterFirst final : RunObserver {
    FaultyFileSystem* fs;
    void on_checkpoint(int64_t, const std::string&) override { fs->fail_writes = true; }
  } arm;
  arm.fs = &faulty;
  Result<RunResult> failed = train_plan(plan, broken, arm);
  REQUIRE_FALSE(failed.is_ok());
  CHECK_MESSAGE(failed.message().find("step 4: checkpoint not saved") == 0, failed.message());
  CHECK(failed.message().find("injected") != std::string::npos);
  StateStoreOptions store_options;
  store_options.directory = broken.checkpoint_dir;
  CHECK(StateStore(store_options).steps().value() == std::vector<int64_t>{2});

  // Resume from step 2 (writes work again) and finish: identical to the uninterrupted run.
  faulty.fail_writes = false;
  RunOptions resumed = base;
  resumed.resume_dir = broken.checkpoint_dir;
  resumed.checkpoint_dir = broken.checkpoint_dir;
  Recorder rest;
  Result<RunResult> second = train_plan(plan, resumed, rest);
  REQUIRE_MESSAGE(second.is_ok(), second.message());
  CHECK(second->first_step == 3);
  REQUIRE(rest.steps.size() == 4);
  for (size_t i = 0; i < rest.steps.size(); ++i) CHECK(rest.steps[i].loss == full.steps[i + 2].loss);
  const auto a = run_test::checkpoint_part(straight.checkpoint_dir, "model.pt");
  const auto b = run_test::checkpoint_part(broken.checkpoint_dir, "model.pt");
  REQUIRE(a.size() == b.size());
  for (const auto& [name, tensor] : a) CHECK_MESSAGE(torch::equal(tensor, b.at(name)), name);

  // Too little room for the checkpoints the run keeps: refused before training starts.
  FaultyFileSystem small_disk;
  small_disk.free = 1024;
  RunOptions no_space = base;
  no_space.checkpoint_dir = temp_dir("full");
  no_space.file_system = &small_disk;
  RunObserver quiet;
  Result<RunResult> refused = train_plan(plan, no_space, quiet);
  REQUIRE_FALSE(refused.is_ok());
  // Small amounts in bytes, never "0.00 GiB free ... 0.01 GiB" (issue 37 item 8).
  CHECK_MESSAGE(refused.message().find("--checkpoint-dir " + no_space.checkpoint_dir + ": 1024 bytes free") == 0,
                refused.message());
  CHECK(refused.message().find("0.00 GiB") == std::string::npos);
  CHECK(refused.message().find("nothing was trained") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(no_space.checkpoint_dir));

  // The disk fills up during the run: the save at step 4 is refused before
  // writing anything, and step 2 stays intact.
  struct FillDisk final : RunObserver {
    FaultyFileSystem* fs;
    void on_checkpoint(int64_t, const std::string&) override { fs->free = 4096; }
  } fill;
  FaultyFileSystem filling;
  fill.fs = &filling;
  RunOptions fills = base;
  fills.checkpoint_dir = temp_dir("fills");
  fills.file_system = &filling;
  Result<RunResult> stopped = train_plan(plan, fills, fill);
  REQUIRE_FALSE(stopped.is_ok());
  CHECK_MESSAGE(stopped.message().find("step 4: checkpoint not saved") == 0, stopped.message());
  CHECK(stopped.message().find("nothing was written; step-00000002 is intact") != std::string::npos);
  store_options.directory = fills.checkpoint_dir;
  CHECK(StateStore(store_options).steps().value() == std::vector<int64_t>{2});

  // A checkpoint of another run is not resumed.
  RunOptions other = base;
  other.seed = 99;
  other.resume_dir = straight.checkpoint_dir;
  Result<RunResult> wrong = train_plan(plan, other, quiet);
  REQUIRE_FALSE(wrong.is_ok());
  CHECK_MESSAGE(wrong.message().find("written by another run") != std::string::npos, wrong.message());
  for (const std::string& d : {straight.checkpoint_dir, broken.checkpoint_dir, no_space.checkpoint_dir,
                               fills.checkpoint_dir}) {
    std::filesystem::remove_all(d);
  }
}

}  // namespace headroom::executor

namespace headroom::executor {

TEST_CASE("AdamW offloaded to the CPU trains like AdamW on the device (bf16 mixed, fp32 master weights)") {
  planner::Plan device = plan_for("tiny-llama", planner::Precision::kBf16Mixed, planner::TrainMode::kFull,
                                  planner::CheckpointPolicy::kEveryBlock);
  planner::Plan offloaded = device;
  offloaded.config.offload_optimizer = planner::Offload::kCpu;
  offloaded.config.zero_stage = 2;
  RunOptions options;
  options.steps = 5;
  options.learning_rate = 3e-3;
  options.device = "cpu";
  Recorder a;
  Recorder b;
  Result<RunResult> on_device = train_plan(device, options, a);
  Result<RunResult> on_host = train_plan(offloaded, options, b);
  REQUIRE_MESSAGE(on_device.is_ok(), on_device.message());
  REQUIRE_MESSAGE(on_host.is_ok(), on_host.message());
  REQUIRE(a.steps.size() == b.steps.size());
  // Same update (torch's AdamW formula), bf16 rounding of the parameters aside.
  for (size_t i = 0; i < a.steps.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(b.steps[i].loss == doctest::Approx(a.steps[i].loss).epsilon(0.02));
  }
  CHECK(b.steps.back().loss < b.steps.front().loss);
  CHECK(find(on_host.value(), "optimizer states + master weights") == nullptr);  // host memory on a CPU run
}

TEST_CASE("fp16 mixed precision scales the loss and trains") {
  const planner::Plan plan = plan_for("tiny-llama", planner::Precision::kFp16Mixed, planner::TrainMode::kFull,
                                      planner::CheckpointPolicy::kNone);
  RunOptions options;
  options.steps = 6;
  options.learning_rate = 3e-3;
  options.device = "cpu";
  Recorder recorder;
  Result<RunResult> r = train_plan(plan, options, recorder);
  REQUIRE_MESSAGE(r.is_ok(), r.message());
  // GradScaler's rule: start at 2^16, halve and skip on inf/NaN gradients.
  double scale = 65536.0;
  int taken = 0;
  for (const StepMetrics& m : recorder.steps) {
    CHECK(std::isfinite(m.loss));
    if (m.skipped) scale *= 0.5;
    taken += !m.skipped;
    CHECK(m.loss_scale == scale);
  }
  CHECK(taken >= 3);
  CHECK(recorder.steps.back().loss < recorder.steps.front().loss);
  check_categories(r.value(), {"parameters", "optimizer states + master weights", "gradients"});
}

TEST_CASE("a plan that needs more host memory than there is is refused before anything is built (issue 14)") {
  const planner::Plan plan = plan_for("tiny-llama", planner::Precision::kFp32, planner::TrainMode::kFull,
                                      planner::CheckpointPolicy::kNone);
  RunOptions options;
  options.steps = 1;
  options.device = "cpu";
  options.host_bytes_available = 1 << 20;  // 1 MiB
  Recorder recorder;
  Result<RunResult> r = train_plan(plan, options, recorder);
  REQUIRE_FALSE(r.is_ok());
  CHECK_MESSAGE(r.message().find("host memory: this plan (") == 0, r.message());
  CHECK(r.message().find("of model states and activations on the CPU") != std::string::npos);
  CHECK(r.message().find("but 0.0 GiB is available") != std::string::npos);
  CHECK(recorder.steps.empty());
  options.host_bytes_available = int64_t{64} << 30;
  CHECK(train_plan(plan, options, recorder).is_ok());
}

TEST_CASE("a token file trains and a bad one is refused naming the file") {
  const planner::Plan plan = plan_for("tiny-llama", planner::Precision::kFp32, planner::TrainMode::kFull,
                                      planner::CheckpointPolicy::kNone);
  const std::string path = temp_dir("tokens.bin");
  {
    std::ofstream out(path, std::ios::binary);
    for (uint16_t i = 0; i < 4096; ++i) {
      const uint16_t id = static_cast<uint16_t>((i * 3) % 256);
      out.write(reinterpret_cast<const char*>(&id), 2);
    }
  }
  RunOptions options;
  options.steps = 2;
  options.device = "cpu";
  options.data = path;
  options.token_bytes = 2;
  RunObserver quiet;
  Result<RunResult> ok = train_plan(plan, options, quiet);
  CHECK_MESSAGE(ok.is_ok(), ok.message());
  options.token_bytes = 4;
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write("\x01\x00", 2);  // now an odd number of uint32 ids: 8194 bytes
  }
  Result<RunResult> bad = train_plan(plan, options, quiet);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.message().find(path) == 0);
  std::filesystem::remove(path);
}

}  // namespace headroom::executor

namespace headroom::executor {

TEST_CASE("a family that trains on synthetic data only refuses a token file, as its row says") {
  for (const char* model : {"tiny-flux", "tiny-resnet", "tiny-eva-vit"}) {
    INFO(model);
    const planner::Plan plan =
        plan_for(model, planner::Precision::kFp32, planner::TrainMode::kFull, planner::CheckpointPolicy::kNone);
    RunOptions options;
    options.steps = 1;
    options.device = "cpu";
    options.data = "/tmp/tokens.bin";
    RunObserver quiet;
    Result<RunResult> r = train_plan(plan, options, quiet);
    REQUIRE_FALSE(r.is_ok());
    const ModelFamilyInfo& family = model_family(executable_model(model, "p").value().family);
    CHECK(r.message() == std::string("/tmp/tokens.bin: ") + family.name + " trains on synthetic " +
                             family.synthetic_data + " only (expected --data synthetic)");
  }
}

}  // namespace headroom::executor
