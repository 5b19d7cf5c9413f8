// Exports of a Plan: the DeepSpeed config read back by the importer gives the
// same settings and the same prediction; the Accelerate YAML parses to the
// expected values; the torch snippet is valid Python for any module names.
// Python checks run python3 (with PyYAML for the YAML) and are skipped, with a
// message, where it is missing.
#include "reports/config_export.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "planner/configs/accelerate_import.h"
#include "planner/configs/deepspeed_import.h"
#include "planner/predict/planner.h"

namespace headroom::reports {
namespace {

using planner::BlockChoice;
using planner::Offload;
using planner::Precision;
using planner::RunSettings;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A plan for `s` as `headroom fit` would make it, with blocks 1 and 2 of the
// graph checkpointed and offloaded when `choices` is set.
planner::Plan make_plan(const RunSettings& s, bool choices) {
  Result<planner::ModelContext> context = planner::prepare_context(s);
  REQUIRE_MESSAGE(context.is_ok(), context.message());
  Result<std::vector<BlockChoice>> blocks = planner::user_block_choices(context.value(), s);
  REQUIRE(blocks.is_ok());
  planner::Plan plan;
  plan.model = s.model;
  plan.gpu = s.gpu;
  plan.settings = s;
  plan.config = planner::user_config(s);
  plan.blocks = blocks.value();
  for (const graph::Block& block : context->graph.blocks) plan.block_names.push_back(block.name);
  if (choices) {
    for (size_t b = 0, marked = 0; b < plan.blocks.size() && marked < 2; ++b) {
      if (!context->graph.blocks[b].checkpointable) continue;
      plan.blocks[b] = marked++ == 0 ? BlockChoice::kCheckpoint : BlockChoice::kOffload;
    }
  }
  plan.seq_len = context->seq_len;
  plan.prediction = planner::predict(context.value(), s, plan.config, plan.blocks);
  return plan;
}

RunSettings settings(const std::string& model, int stage, Offload opt, Offload param,
                     Precision precision, int64_t micro, int64_t accum, int gpus) {
  RunSettings s;
  s.model = model;
  s.gpu = "a100-80gb";
  s.seq_len = 512;
  s.zero_stage = stage;
  s.offload_optimizer = opt;
  s.offload_param = param;
  s.precision = precision;
  s.micro_batch = micro;
  s.grad_accum = accum;
  s.gpus_per_node = gpus;
  s.reduce_bucket_elements = 200'000'000;
  s.allgather_bucket_elements = 300'000'000;
  s.prefetch_bucket_elements = 40'000'000;
  s.max_live_parameters = 600'000'000;
  s.overlap_comm = stage != 1;
  s.allow_nvme_offload = true;
  return s;
}

// A base that differs from the plan in everything the config carries; only
// the model, GPU, sequence and GPU count (not in a DeepSpeed config) agree.
RunSettings unrelated_base(const RunSettings& s) {
  RunSettings base;
  base.model = s.model;
  base.gpu = s.gpu;
  base.seq_len = s.seq_len;
  base.gpus_per_node = s.gpus_per_node;
  base.zero_stage = 1;
  base.micro_batch = 7;
  base.grad_accum = 3;
  base.precision = s.precision == Precision::kFp32 ? Precision::kBf16Mixed : Precision::kFp32;
  base.overlap_comm = !s.overlap_comm;
  base.reduce_bucket_elements = base.allgather_bucket_elements = 11;
  base.prefetch_bucket_elements = base.max_live_parameters = 13;
  return base;
}

std::vector<RunSettings> round_trip_cases() {
  return {
      settings("gpt2", 0, Offload::kNone, Offload::kNone, Precision::kFp32, 4, 2, 1),
      settings("gpt2", 1, Offload::kCpu, Offload::kNone, Precision::kFp16Mixed, 2, 8, 2),
      settings("gpt2", 2, Offload::kNone, Offload::kNone, Precision::kBf16Mixed, 8, 1, 4),
      settings("llama-3-8b", 2, Offload::kCpu, Offload::kNone, Precision::kBf16Mixed, 1, 16, 1),
      settings("llama-3-8b", 3, Offload::kCpu, Offload::kCpu, Precision::kBf16Mixed, 2, 4, 8),
      settings("llama-3-8b", 3, Offload::kNvme, Offload::kNvme, Precision::kFp16Mixed, 1, 32, 2),
  };
}

// Runs python3 on `code` with `file` as argv[1]; nullopt when python3 (or
// the module `needs`) is missing.
std::optional<int> run_python(const std::string& code, const std::string& file,
                              const std::string& needs = "") {
  const std::string probe =
      "python3 -c \"import sys" + (needs.empty() ? "" : ", " + needs) + "\" >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) return std::nullopt;
  const std::string command = "python3 -c \"" + code + "\" '" + file + "'";
  return std::system(command.c_str());
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("headroom_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("exported DeepSpeed configs read back to the plan's settings and prediction") {
  for (const RunSettings& s : round_trip_cases()) {
    const planner::Plan plan = make_plan(s, true);
    const nlohmann::json ds = deepspeed_config(plan);
    INFO(ds.dump());
    Result<RunSettings> back = planner::apply_deepspeed_config(ds, unrelated_base(s), "export");
    REQUIRE_MESSAGE(back.is_ok(), back.message());
    CHECK(back->zero_stage == plan.config.zero_stage);
    CHECK(back->offload_optimizer == plan.config.offload_optimizer);
    CHECK(back->offload_param == plan.config.offload_param);
    CHECK(back->reduce_bucket_elements == s.reduce_bucket_elements);
    CHECK(back->allgather_bucket_elements == s.allgather_bucket_elements);
    CHECK(back->prefetch_bucket_elements == s.prefetch_bucket_elements);
    CHECK(back->max_live_parameters == s.max_live_parameters);
    CHECK(back->overlap_comm == s.overlap_comm);
    CHECK(back->precision == s.precision);
    CHECK(back->micro_batch == plan.config.micro_batch);
    CHECK(back->grad_accum == plan.config.grad_accum);
    const planner::GlobalConfig config = planner::user_config(back.value());
    CHECK(config.zero_stage == plan.config.zero_stage);
    CHECK(config.micro_batch == plan.config.micro_batch);
    CHECK(config.grad_accum == plan.config.grad_accum);

    // The prediction for the imported settings is the plan's, field by field.
    Result<planner::ModelContext> context = planner::prepare_context(back.value());
    REQUIRE(context.is_ok());
    const planner::Prediction p =
        planner::predict(context.value(), back.value(), config, plan.blocks);
    CHECK(p.gpu_total == plan.prediction.gpu_total);
    CHECK(p.peak_allocated == plan.prediction.peak_allocated);
    CHECK(p.host_ram == plan.prediction.host_ram);
    CHECK(p.disk == plan.prediction.disk);
    CHECK(p.time.step_ms == plan.prediction.time.step_ms);
    CHECK(p.time.optimizer_ms == plan.prediction.time.optimizer_ms);
  }
}

TEST_CASE("DeepSpeed config: batch arithmetic, precision blocks, offload blocks") {
  const planner::Plan plan = make_plan(
      settings("llama-3-8b", 3, Offload::kNvme, Offload::kCpu, Precision::kFp16Mixed, 2, 8, 4),
      true);
  const nlohmann::json ds = deepspeed_config(plan);
  CHECK(ds["train_batch_size"] == 64);  // 2 x 8 x 4 GPUs
  CHECK(ds["fp16"]["enabled"] == true);
  CHECK(ds["fp16"]["loss_scale"] == 0);
  CHECK(ds["fp16"]["initial_scale_power"] == 16);
  CHECK(ds["bf16"]["enabled"] == false);
  CHECK(ds["gradient_clipping"] == 1.0);
  const nlohmann::json& z = ds["zero_optimization"];
  CHECK(z["offload_optimizer"] ==
        nlohmann::json({{"device", "nvme"}, {"pin_memory", true}, {"nvme_path", "/local_nvme"}}));
  CHECK(z["offload_param"] == nlohmann::json({{"device", "cpu"}, {"pin_memory", true}}));
  CHECK(ds["activation_checkpointing"]["cpu_checkpointing"] == true);
  CHECK(ds["activation_checkpointing"]["number_checkpoints"].is_null());
  CHECK(ds["optimizer"]["type"] == "AdamW");

  const planner::Plan zero2 = make_plan(
      settings("gpt2", 2, Offload::kNone, Offload::kNone, Precision::kBf16Mixed, 1, 1, 1), false);
  const nlohmann::json ds2 = deepspeed_config(zero2);
  CHECK_FALSE(ds2["zero_optimization"].contains("offload_optimizer"));
  CHECK_FALSE(ds2["zero_optimization"].contains("offload_param"));
  CHECK(ds2["activation_checkpointing"]["cpu_checkpointing"] == false);
  CHECK(ds2["bf16"]["enabled"] == true);
  CHECK_FALSE(ds2.contains("headroom"));  // only keys DeepSpeed knows

  const std::vector<std::string> notes = deepspeed_notes(plan);
  bool nvme_note = false;
  for (const std::string& note : notes) nvme_note = nvme_note || contains(note, "nvme_path");
  CHECK(nvme_note);
}

TEST_CASE("Accelerate YAML for an FSDP2 plan is fsdp_version 2 and reads back as the same FSDP") {
  RunSettings s = settings("llama-3-8b", 3, Offload::kNone, Offload::kNone, Precision::kBf16Mixed, 2, 4, 8);
  s.sharding = planner::Sharding::kFsdp2;
  const std::string yaml = accelerate_config_yaml(make_plan(s, false));
  CHECK(contains(yaml, "\n  fsdp_version: 2\n"));
  CHECK(contains(yaml, "\n  fsdp_reshard_after_forward: true\n"));
  CHECK_FALSE(contains(yaml, "fsdp_sharding_strategy"));  // FSDP1's key
  CHECK_FALSE(contains(yaml, "fsdp_use_orig_params"));
  Result<planner::ConfigImport> back = planner::import_accelerate_config(yaml, "exported.yaml", RunSettings{});
  REQUIRE_MESSAGE(back.is_ok(), back.message());
  REQUIRE(back->settings.sharding.has_value());
  CHECK(*back->settings.sharding == planner::Sharding::kFsdp2);
  CHECK(back->settings.zero_stage == 3);
  // ZeRO-2's layout: parameters stay gathered after forward.
  s.zero_stage = 2;
  const std::string zero2 = accelerate_config_yaml(make_plan(s, false));
  CHECK(contains(zero2, "\n  fsdp_reshard_after_forward: false\n"));
  Result<planner::ConfigImport> back2 = planner::import_accelerate_config(zero2, "exported.yaml", RunSettings{});
  REQUIRE_MESSAGE(back2.is_ok(), back2.message());
  CHECK(back2->settings.zero_stage == 2);
  // An FSDP1 plan is fsdp_version 1 with its sharding strategy, and no DeepSpeed caveat.
  s.zero_stage = 3;
  s.sharding = planner::Sharding::kFsdp1;
  const std::string v1 = accelerate_config_yaml(make_plan(s, false));
  CHECK_FALSE(contains(v1, "fsdp_version"));
  CHECK(contains(v1, "\n  fsdp_sharding_strategy: FULL_SHARD\n"));
  CHECK_FALSE(contains(v1, "re-plan with --sharding"));
}

TEST_CASE("checkpoint_modules lists module paths by choice, in block order") {
  planner::Plan plan;
  plan.block_names = {"embeddings", "model.layers.0", "model.layers.1", "model.layers.2", "head"};
  plan.blocks = {BlockChoice::kKeep, BlockChoice::kCheckpoint, BlockChoice::kOffload,
                 BlockChoice::kCheckpoint, BlockChoice::kKeep};
  const CheckpointModules m = checkpoint_modules(plan);
  CHECK(m.checkpoint == std::vector<std::string>{"model.layers.0", "model.layers.2"});
  CHECK(m.offload == std::vector<std::string>{"model.layers.1"});
}

TEST_CASE("Accelerate YAML: sharding strategy, offload, checkpointing, layer class") {
  const planner::Plan plan = make_plan(
      settings("llama-3-8b", 3, Offload::kCpu, Offload::kCpu, Precision::kBf16Mixed, 2, 4, 8),
      true);
  const std::string yaml = accelerate_config_yaml(plan);
  CHECK(contains(yaml, "\n  fsdp_sharding_strategy: FULL_SHARD\n"));
  CHECK(contains(yaml, "\n  fsdp_offload_params: true\n"));
  CHECK(contains(yaml, "\n  fsdp_activation_checkpointing: true\n"));
  CHECK(contains(yaml, "\n  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n"));
  CHECK(contains(yaml, "\n  fsdp_use_orig_params: true\n"));
  CHECK(contains(yaml, "\nnum_processes: 8\n"));
  CHECK(contains(yaml, "gradient_accumulation_steps=4"));
  // Priced as DeepSpeed's ZeRO-3 (no stack): written as FSDP1, and the file says the buffers differ.
  CHECK_FALSE(contains(yaml, "fsdp_version"));  // 1, the default: older Accelerate versions lack the key
  CHECK(contains(yaml, "re-plan with --sharding fsdp1"));

  planner::Plan other = make_plan(
      settings("gpt2", 0, Offload::kNone, Offload::kNone, Precision::kFp32, 1, 1, 1), false);
  const std::string plain = accelerate_config_yaml(other);
  CHECK(contains(plain, "fsdp_sharding_strategy: NO_SHARD"));
  CHECK(contains(plain, "mixed_precision: 'no'"));
  CHECK(contains(plain, "fsdp_activation_checkpointing: false"));
  CHECK(contains(plain, "fsdp_transformer_layer_cls_to_wrap: GPT2Block"));
  other.model = "my-model\nevil: 'x'";
  const std::string unknown = accelerate_config_yaml(other);
  CHECK(contains(unknown,
                 std::string("fsdp_transformer_layer_cls_to_wrap: ") + kLayerClassPlaceholder));

  // Parsed by a YAML reader, the file holds the expected values and nothing
  // leaks out of the comments.
  const std::string file = temp_file("accelerate.yaml", unknown);
  const std::string out = file + ".json";
  const std::optional<int> rc = run_python(
      "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), open(sys.argv[1] + "
      "'.json', 'w'))",
      file, "yaml");
  if (!rc) {
    MESSAGE("python3 with PyYAML not found: YAML parse check skipped");
  } else {
    REQUIRE(*rc == 0);
    const nlohmann::json parsed = nlohmann::json::parse(read_text(out));
    CHECK(parsed["distributed_type"] == "FSDP");
    CHECK(parsed["mixed_precision"] == "no");
    CHECK(parsed["downcast_bf16"] == "no");
    CHECK(parsed["num_processes"] == 1);
    CHECK(parsed["fsdp_config"]["fsdp_offload_params"] == false);
    CHECK(parsed["fsdp_config"]["fsdp_sharding_strategy"] == "NO_SHARD");
    CHECK_FALSE(parsed.contains("evil"));
    std::filesystem::remove(out);
  }
  std::filesystem::remove(file);
}

TEST_CASE("torch snippet: the plan's modules, valid Python even for hostile names") {
  const planner::Plan plan = make_plan(
      settings("llama-3-8b", 2, Offload::kCpu, Offload::kNone, Precision::kBf16Mixed, 2, 8, 1),
      true);
  const std::string snippet = torch_snippet(plan);
  CHECK(contains(snippet, "use_reentrant=False"));
  CHECK(contains(snippet, "save_on_cpu(pin_memory=True)"));
  CHECK(contains(snippet, "GRAD_ACCUM = 8"));
  CHECK(contains(snippet, "MICRO_BATCH = 2"));
  CHECK(contains(snippet, "AUTOCAST_DTYPE = torch.bfloat16"));
  const CheckpointModules modules = checkpoint_modules(plan);
  REQUIRE(modules.checkpoint.size() == 1);
  REQUIRE(modules.offload.size() == 1);
  CHECK(contains(snippet, "\"" + modules.checkpoint[0] + "\""));
  CHECK(contains(snippet, "\"" + modules.offload[0] + "\""));

  planner::Plan hostile = plan;
  hostile.model = "x\"\nimport os";
  hostile.block_names[1] = "a\"b\\c\n'''\x01\xc3\xa9\U0001F600";
  planner::Plan invalid_utf8 = plan;
  invalid_utf8.block_names[1] = "bad\xff\xc3";
  invalid_utf8.blocks[1] = BlockChoice::kOffload;
  hostile.blocks[1] = BlockChoice::kCheckpoint;
  hostile.settings.precision = Precision::kFp16Mixed;
  planner::Plan fp32 = plan;
  fp32.settings.precision = Precision::kFp32;
  for (const planner::Plan* p :
       std::initializer_list<const planner::Plan*>{&plan, &hostile, &fp32, &invalid_utf8}) {
    const std::string file = temp_file("snippet.py", torch_snippet(*p));
    const std::optional<int> rc =
        run_python("import ast, sys; ast.parse(open(sys.argv[1]).read())", file);
    if (!rc) {
      MESSAGE("python3 not found: Python syntax check skipped");
    } else {
      CHECK_MESSAGE(*rc == 0, torch_snippet(*p));
    }
    std::filesystem::remove(file);
  }
  // The hostile name comes back exactly when Python reads the literal.
  const std::string file = temp_file("names.py", torch_snippet(hostile));
  std::ofstream(file + ".name", std::ios::binary) << hostile.block_names[1];
  const std::optional<int> rc = run_python(
      "import ast, sys; t = ast.parse(open(sys.argv[1], encoding='utf-8').read()); "
      "v = [n.value for n in ast.walk(t) if isinstance(n, ast.Assign) and getattr(n.targets[0], "
      "'id', '') == 'CHECKPOINT_MODULES']; "
      "sys.exit(0 if ast.literal_eval(v[0])[0] == open(sys.argv[1] + '.name', encoding='utf-8', "
      "newline='').read() "
      "else 1)",
      file);
  if (rc) CHECK(*rc == 0);
  std::filesystem::remove(file);
  std::filesystem::remove(file + ".name");
}

}  // namespace headroom::reports

namespace headroom::reports {

TEST_CASE("AMP plans export as autocast: no DeepSpeed 16-bit mode, Accelerate and torch in the AMP dtype") {
  const planner::Plan bf16_amp =
      make_plan(settings("gpt2", 2, Offload::kNone, Offload::kNone, Precision::kBf16Amp, 1, 1, 1), false);
  const nlohmann::json ds = deepspeed_config(bf16_amp);
  CHECK(ds["bf16"]["enabled"] == false);
  CHECK(ds["fp16"]["enabled"] == false);
  bool autocast_note = false;
  for (const std::string& note : deepspeed_notes(bf16_amp)) autocast_note = autocast_note || contains(note, "torch.autocast");
  CHECK(autocast_note);
  const planner::Plan fp16_amp =
      make_plan(settings("gpt2", 2, Offload::kNone, Offload::kNone, Precision::kFp16Amp, 1, 1, 1), false);
  CHECK(contains(accelerate_config_yaml(fp16_amp), "mixed_precision: fp16"));
  const std::string snippet = torch_snippet(fp16_amp);
  CHECK(contains(snippet, "torch.float16"));
  CHECK(contains(snippet, "GradScaler"));
}

}  // namespace headroom::reports
