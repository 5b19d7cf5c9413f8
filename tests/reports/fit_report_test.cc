#include "reports/fit_report.h"

#include <doctest/doctest.h>

#include <string>

#include "reports/catalogue_report.h"
#include "reports/text_table.h"
#include "reports/units.h"

namespace headroom::reports {
namespace {

using planner::BlockChoice;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A hand-made prediction: a 48 GiB GPU, 5% margin, 40 GiB of parameters.
planner::Prediction sample_prediction(bool fits) {
  planner::Prediction p;
  p.peak.cuda_context = kGiB / 2;
  p.peak.parameters = 40 * kGiB;
  p.peak.activations = fits ? kGiB / 2 : 10 * kGiB;
  p.peak_allocated = p.peak.parameters + p.peak.activations;
  p.peak_reserved = p.peak_allocated;
  p.gpu_total = p.peak.total();
  p.gpu_capacity = 48 * kGiB;
  p.gpu_budget = p.gpu_capacity - p.gpu_capacity / 20;  // 45.6 GiB
  p.where = {"backward", 3, "layers.2"};
  p.host_ram = 12 * kGiB;
  p.host_ram_budget = 128 * kGiB;
  p.checkpoint_bytes = 32'000'000'000;
  p.disk = 3 * p.checkpoint_bytes;
  p.disk_budget = 500'000'000'000;
  p.time.forward_ms = 300;
  p.time.backward_ms = 600;
  p.time.optimizer_ms = 100;
  p.time.step_ms = 1000;
  p.time.samples_per_s = 4;
  p.time.tokens_per_s = 8192;
  p.time.mfu = 0.41;
  p.fits_gpu = p.gpu_total <= p.gpu_budget;
  p.fits_host = true;
  p.fits_disk = true;
  return p;
}

planner::Plan sample_plan(bool fits) {
  planner::Plan plan;
  plan.model = "llama-3-8b";
  plan.gpu = "a6000";
  plan.seq_len = 2048;
  plan.block_names = {"embed", "layers.0", "layers.1", "layers.2", "layers.3", "head"};
  plan.blocks = {BlockChoice::kKeep,       BlockChoice::kKeep,       BlockChoice::kCheckpoint,
                 BlockChoice::kCheckpoint, BlockChoice::kCheckpoint, BlockChoice::kOffload};
  plan.config.zero_stage = 2;
  plan.config.micro_batch = 2;
  plan.config.grad_accum = 8;
  plan.prediction = sample_prediction(fits);
  return plan;
}

TEST_CASE("breakdown table shows each category in GiB") {
  const std::string table = breakdown_table(sample_prediction(true));
  CHECK(contains(table, "parameters"));
  CHECK(contains(table, "40.0 GiB"));
  CHECK(contains(table, "0.5 GiB"));   // context and activations
  CHECK(contains(table, "41.0 GiB"));  // total
  CHECK(contains(table, "peak allocated"));
  CHECK(contains(table, "peak reserved"));
  CHECK(contains(table, "allocator slack"));
}

TEST_CASE("verdict line says FITS with the spare memory above the margin") {
  const planner::Prediction p = sample_prediction(true);
  const std::string line = verdict_line(p, "NVIDIA RTX A6000", 0.05);
  CHECK(line ==
        "FITS on NVIDIA RTX A6000 (48.0 GiB): peak 41.0 GiB, 4.6 GiB to spare above the 5% "
        "safety margin");
}

TEST_CASE("verdict line says DOES NOT FIT and by how much") {
  const planner::Prediction p = sample_prediction(false);
  const std::string line = verdict_line(p, "NVIDIA RTX A6000", 0.05);
  CHECK(contains(line, "DOES NOT FIT on NVIDIA RTX A6000 (48.0 GiB)"));
  CHECK(contains(line, "peak 50.5 GiB"));
  CHECK(contains(line, "short by 4.9 GiB"));
  CHECK(contains(line, "budget 45.6 GiB"));

  planner::Prediction host_short = sample_prediction(true);
  host_short.fits_host = false;
  host_short.host_ram = 200 * kGiB;
  const std::string host_line = verdict_line(host_short, "X", 0.05);
  CHECK(contains(host_line, "DOES NOT FIT"));
  CHECK(contains(host_line, "host RAM needs 200.0 GiB of 128.0 GiB"));
}

TEST_CASE("peak location names the phase and the block") {
  CHECK(contains(peak_line(sample_prediction(true)), "backward, in layers.2 (block 3)"));
  planner::Prediction optimizer = sample_prediction(true);
  optimizer.where = {"optimizer step", -1, ""};
  CHECK(contains(peak_line(optimizer), "optimizer step"));
}

TEST_CASE("resources explain checkpoints kept plus the one being written") {
  const std::string text = resources_text(sample_prediction(true), 2);
  CHECK(contains(text, "Host RAM: 12.0 GiB needed of 128.0 GiB (ok)"));
  CHECK(contains(text, "Disk: 96.0 GB needed of 500.0 GB (ok)"));
  CHECK(contains(text, "3 training-state checkpoints of 32.0 GB (2 kept + 1 being written)"));
  CHECK_FALSE(contains(text, "NVMe"));
}

TEST_CASE("time text gives step time, parts and throughput") {
  const std::string text = time_text(sample_prediction(true));
  CHECK(contains(text, "1000.0 ms per optimizer step"));
  CHECK(contains(text, "forward 300.0 ms"));
  CHECK(contains(text, "optimizer 100.0 ms"));
  CHECK_FALSE(contains(text, "recompute"));  // zero parts are left out
  CHECK(contains(text, "4.00 samples/s, 8,192 tokens/s, MFU 41%"));
}

TEST_CASE("compact block lists merge consecutive numbered blocks") {
  CHECK(compact_block_list({"layers.1", "layers.2", "layers.3"}) == "layers.1-3");
  CHECK(compact_block_list({"embed", "layers.0", "layers.1", "layers.3", "head"}) ==
        "embed, layers.0-1, layers.3, head");
  CHECK(compact_block_list({"double.18", "single.0", "single.1"}) == "double.18, single.0-1");
  CHECK(compact_block_list({}) == "");
  CHECK(compact_block_list({"a.b.7"}) == "a.b.7");

  const planner::Plan plan = sample_plan(true);
  CHECK(block_choice_line(plan, BlockChoice::kCheckpoint) == "checkpoint: layers.1-3 (3 blocks)");
  CHECK(block_choice_line(plan, BlockChoice::kOffload) == "offload: head (1 block)");
  planner::Plan none = plan;
  none.blocks.assign(6, BlockChoice::kKeep);
  CHECK(block_choice_line(none, BlockChoice::kCheckpoint) == "checkpoint: none");
}

TEST_CASE("globals line spells out the batch arithmetic") {
  planner::GlobalConfig config;
  config.zero_stage = 3;
  config.offload_optimizer = planner::Offload::kCpu;
  config.micro_batch = 2;
  config.grad_accum = 16;
  CHECK(globals_line(config, 4) ==
        "ZeRO-3, optimizer offload cpu, parameter offload none, micro-batch 2 x 16 "
        "accumulation steps x 4 GPUs = global batch 128");
}

TEST_CASE("fit report shows the alternative plan when the run does not fit") {
  planner::FitAnswer answer;
  answer.as_given = sample_plan(false);
  answer.fits = false;
  answer.alternative.found = true;
  answer.alternative.best = sample_plan(true);
  const std::string text = fit_report(answer, "NVIDIA RTX A6000");
  CHECK(contains(text, "DOES NOT FIT"));
  CHECK(contains(text, "The fastest plan that fits"));
  CHECK(contains(text, "checkpoint: layers.1-3 (3 blocks)"));
  CHECK(contains(text, "40.0 GiB"));

  answer.alternative.found = false;
  answer.alternative.suggestions.push_back(
      {"2 x NVIDIA RTX A6000", "fits with ZeRO-3", 30 * kGiB, 45 * kGiB, 250.0});
  answer.alternative.suggestions.push_back({"sequence length 1024", "longest that fits", 0, 0, 0});
  const std::string none = fit_report(answer, "NVIDIA RTX A6000");
  CHECK(contains(none, "What would make it fit"));
  CHECK(contains(none, "2 x NVIDIA RTX A6000: peak 30.0 GiB of 45.0 GiB budget, 250.0 ms"));
  CHECK(contains(none, "  - sequence length 1024\n"));  // no zeros for a suggestion without numbers
}

TEST_CASE("plan report has the frontier and the largest batch and sequence") {
  planner::PlanResult result;
  result.found = true;
  result.best = sample_plan(true);
  result.frontier.push_back({20 * kGiB, 300.0, result.best.config, 4, 1});
  result.frontier.push_back({41 * kGiB, 250.0, result.best.config, 3, 1});
  result.max_micro_batch = 6;
  result.max_seq_len = 8192;
  result.configs_evaluated = 12;
  result.space = "gradient checkpointing of every block or none";
  result.best.settings.stack = planner::Stack::kHfTrainer;
  planner::Suggestion faster;
  faster.change = "--may-change all";
  faster.gpu_total = 30 * kGiB;
  faster.gpu_budget = 45 * kGiB;
  faster.sample_ms = 200.0;
  result.alternatives.push_back(faster);
  const std::string text = plan_report(result, "NVIDIA RTX A6000");
  CHECK(contains(text, "The fastest plan that fits"));
  CHECK(contains(text, "12 configurations evaluated"));
  CHECK(contains(text, "20.0 GiB"));
  CHECK(contains(text, "300.0 ms"));
  // Both largest values say what they hold for (issue 36).
  CHECK(contains(text, "Largest micro-batch that fits at sequence " + std::to_string(result.best.seq_len) +
                           ", within the space searched: 6"));
  CHECK(contains(text, "at micro-batch 1, within the space searched: 8192"));
  // The space searched, and what lies beyond it with its numbers.
  CHECK(contains(text, "Searched: gradient checkpointing of every block or none (what the hf-trainer stack changes"));
  CHECK(contains(text, "Faster beyond that space:\n  - --may-change all: peak 30.0 GiB of 45.0 GiB budget"));
}

TEST_CASE("fit JSON carries the verdict, the run and the alternative") {
  planner::FitAnswer answer;
  answer.as_given = sample_plan(true);
  answer.fits = true;
  planner::GpuSpec gpu;
  gpu.id = "a6000";
  gpu.name = "NVIDIA RTX A6000";
  gpu.memory_bytes = 48 * kGiB;
  const nlohmann::json json = fit_to_json(answer, gpu);
  CHECK(json["command"] == "fit");
  CHECK(json["fits"] == true);
  CHECK(json["gpu"]["id"] == "a6000");
  CHECK(json["gpu"]["memory_bytes"] == 48 * kGiB);
  CHECK(json["alternative"].is_null());
  CHECK(json["gpu_margin_bytes"] == answer.as_given.prediction.gpu_margin());
  CHECK(json["as_given"]["prediction"]["breakdown"]["parameters_bytes"] == 40 * kGiB);
  CHECK(json["as_given"]["blocks"].size() == 6);
  CHECK(json["verdict"].get<std::string>().rfind("FITS", 0) == 0);

  answer.fits = false;
  answer.alternative.best = sample_plan(true);
  answer.alternative.suggestions.push_back({"QLoRA (r=16)", "fits", kGiB, 2 * kGiB, 5.0});
  answer.alternative.frontier.push_back({20 * kGiB, 300.0, answer.alternative.best.config, 4, 1});
  const nlohmann::json not_fit = fit_to_json(answer, gpu);
  const nlohmann::json& alt = not_fit["alternative"];
  CHECK(alt["found"] == false);
  CHECK(alt["suggestions"][0]["change"] == "QLoRA (r=16)");
  CHECK(alt["suggestions"][0]["gpu_budget_bytes"] == 2 * kGiB);
  CHECK(alt["frontier"][0]["gpu_total_bytes"] == 20 * kGiB);
  CHECK(alt["frontier"][0]["config"]["zero_stage"] == 2);
  CHECK(alt["frontier"][0]["checkpointed_blocks"] == 4);
  CHECK(alt["best_sample_ms"] == doctest::Approx(250.0));
}

TEST_CASE("plan JSON document wraps the plan result") {
  planner::PlanResult result;
  result.found = true;
  result.best = sample_plan(true);
  result.max_micro_batch = 6;
  planner::GpuSpec gpu;
  gpu.id = "a6000";
  const nlohmann::json json = plan_document_to_json(result, gpu);
  CHECK(json["command"] == "plan");
  CHECK(json["found"] == true);
  CHECK(json["max_micro_batch"] == 6);
  CHECK(json["best"]["format"] == "headroom.plan");
  CHECK(json["frontier"].is_array());
}

// find_plan leaves PlanResult::best default-constructed when no plan fits even
// under its widest budget; the reports must not show that empty plan as a
// block of zeros with an empty model name.
planner::PlanResult result_without_any_plan() {
  planner::PlanResult result;
  result.found = false;
  result.frontier.push_back({180 * kGiB, 8600.0, planner::GlobalConfig{}, 35, 0});
  result.configs_evaluated = 60;
  result.suggestions.push_back(
      {"4 x NVIDIA RTX A6000", "fits with ZeRO-3", 45 * kGiB, 46 * kGiB, 2200.0});
  return result;
}

TEST_CASE("plan report without any plan says so in one line and shows no zero plan") {
  const std::string text = plan_report(result_without_any_plan(), "NVIDIA RTX A6000");
  CHECK(text.rfind(
            "DOES NOT FIT on NVIDIA RTX A6000: no plan fits, even with up to 64x the GPU memory\n",
            0) == 0);
  CHECK_FALSE(contains(text, "least-memory plan"));
  CHECK_FALSE(contains(text, "0.0 GiB of 0.0 GiB"));
  CHECK_FALSE(contains(text, "GPU memory at the peak"));
  CHECK_FALSE(contains(text, ": bf16-mixed"));  // the run line of a plan without a model
  CHECK(contains(text, "Memory/time frontier (60 configurations evaluated)"));
  CHECK(contains(text, "180.0 GiB"));
  CHECK(contains(text, "What would make it fit:\n  - 4 x NVIDIA RTX A6000"));
}

TEST_CASE("fit report without any alternative plan shows no zero plan") {
  planner::FitAnswer answer;
  answer.as_given = sample_plan(false);
  answer.fits = false;
  answer.alternative = result_without_any_plan();
  const std::string text = fit_report(answer, "NVIDIA RTX A6000");
  CHECK(contains(text,
                 "\nNo plan fits, even with up to 64x the GPU memory; what would make it fit:\n"
                 "  - 4 x NVIDIA RTX A6000"));
  CHECK_FALSE(contains(text, "least-memory plan"));
  CHECK_FALSE(contains(text, "0.0 GiB of 0.0 GiB"));
  CHECK(contains(text, "The run as given:"));  // the run itself is still shown
}

TEST_CASE("JSON without any plan has best null") {
  planner::GpuSpec gpu;
  gpu.id = "a6000";
  gpu.name = "NVIDIA RTX A6000";
  const nlohmann::json json = plan_document_to_json(result_without_any_plan(), gpu);
  CHECK(json["found"] == false);
  CHECK(json["best"].is_null());
  CHECK(json["best_sample_ms"] == 0.0);
  CHECK(json["verdict"] ==
        "DOES NOT FIT on NVIDIA RTX A6000: no plan fits, even with up to 64x the GPU memory");
  CHECK(json["suggestions"].size() == 1);

  planner::FitAnswer answer;
  answer.as_given = sample_plan(false);
  answer.alternative = result_without_any_plan();
  const nlohmann::json fit = fit_to_json(answer, gpu);
  CHECK(fit["alternative"]["best"].is_null());
  CHECK(fit["as_given"]["model"] == "llama-3-8b");

  // A least-memory plan found under a wider budget is still given.
  planner::PlanResult near = result_without_any_plan();
  near.best = sample_plan(false);
  CHECK(plan_document_to_json(near, gpu)["best"]["model"] == "llama-3-8b");
  CHECK(contains(plan_report(near, "NVIDIA RTX A6000"), "the least-memory plan"));
}

TEST_CASE("when host RAM, not the GPU, is short, the report names it (issue 14)") {
  planner::PlanResult result = result_without_any_plan();
  result.best = sample_plan(false);
  result.short_of = {"host RAM"};
  const std::string text = plan_report(result, "NVIDIA RTX A6000");
  CHECK(contains(text, "No plan fits the host RAM budget; the fastest plan that fits the GPU:\n"));
  CHECK_FALSE(contains(text, "least-memory plan"));
  planner::GpuSpec gpu;
  gpu.id = "a6000";
  gpu.name = "NVIDIA RTX A6000";
  CHECK(plan_document_to_json(result, gpu)["short_of"] == nlohmann::json::array({"host RAM"}));
  planner::FitAnswer answer;
  answer.as_given = sample_plan(false);
  answer.alternative = result;
  CHECK(contains(fit_report(answer, "NVIDIA RTX A6000"), "No plan fits the host RAM budget"));
}

TEST_CASE("catalogue listings") {
  planner::GpuSpec gpu;
  gpu.id = "a6000";
  gpu.name = "NVIDIA RTX A6000";
  gpu.memory_bytes = 49140 * kMiB;
  gpu.bf16_tflops = 154.8;
  gpu.memory_bandwidth_gbps = 768;
  const std::string table = gpus_table({gpu});
  CHECK(contains(table, "a6000"));
  CHECK(contains(table, "48.0 GiB"));
  CHECK(contains(table, "154.8 TFLOPS"));
  CHECK(contains(table, "768 GB/s"));
  CHECK(gpus_to_json({gpu})["gpus"][0]["memory_bytes"] == 49140 * kMiB);

  const std::vector<ModelSummary> models = {{"gpt2", "GPT-2 small", 124'439'808, ""}};
  CHECK(contains(models_table(models), "124.4 M"));
  CHECK(models_to_json(models)["models"][0]["parameters"] == 124'439'808);
}

TEST_CASE("text table pads columns") {
  TextTable table({"name", "value"});
  table.add_row({"a", "1"});
  table.add_row({"long name", "12345"});
  CHECK(table.render(0) == "name       value\na              1\nlong name  12345\n");
}

}  // namespace
}  // namespace headroom::reports
