#include "reports/accelerate_patch.h"

#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>

#include "planner/settings/stack.h"
#include "reports/config_export.h"
#include "reports/line_edits.h"

namespace headroom::reports {
namespace {

using planner::Offload;
using planner::Sharding;

// The keys of a block-style YAML file as `accelerate config` writes it
// (yaml.safe_dump: sorted keys, two-space blocks): top-level `key: value` lines
// at column 0 and one level of `  key: value` lines under a plugin block. Sets
// are collected, then written as one diff that keeps every other line and each
// replaced line's comment; new keys go where sorted order puts them.
class AccelerateYaml {
 public:
  AccelerateYaml(std::string_view text, std::string_view path) : edits_(text), path_(path) {
    const std::regex top("^" + kKey + ":(.*)$");
    const std::vector<std::string>& lines = edits_.lines();
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (std::regex_match(lines[i], m, top)) top_.push_back(entry(m, i, false));
    }
  }

  std::string value(const std::string& key) const {
    const Entry* found = find_top(key);
    return found ? value_of(*found) : "";
  }
  std::string value(const std::string& block, const std::string& key) const {
    for (const Entry& child : children(block)) {
      if (child.key == key) return value_of(child);
    }
    return "";
  }
  bool has(const std::string& block, const std::string& key) const {
    const std::vector<Entry> found = children(block);
    return std::any_of(found.begin(), found.end(), [&](const Entry& e) { return e.key == key; });
  }

  // Sets are no-ops where the file already says the value.
  void set(const std::string& key, const std::string& value) {
    if (find_top(key) == nullptr || this->value(key) != value) top_sets_.emplace_back(key, value);
  }
  void set(const std::string& block, const std::string& key, const std::string& value) {
    if (!has(block, key) || this->value(block, key) != value) child_sets_[block].emplace_back(key, value);
  }
  bool changed() const { return !top_sets_.empty() || !child_sets_.empty(); }

  Result<std::string> diff() {
    for (const auto& [key, value] : top_sets_) {
      if (const Entry* found = find_top(key)) {
        replace_value(*found, value);
      } else {
        edits_.insert_before(top_position(key), {key + ": " + value});
      }
    }
    for (auto& [block, sets] : child_sets_) {
      const Entry* head = find_top(block);
      if (head == nullptr) {
        std::sort(sets.begin(), sets.end());
        std::vector<std::string> lines = {block + ":"};
        for (const auto& [key, value] : sets) lines.push_back("  " + key + ": " + value);
        edits_.insert_before(top_position(block), lines);
        continue;
      }
      const std::string inline_value = scalar(head->rest);
      if (!inline_value.empty() && inline_value != "{}" && inline_value != "null") {
        return Status::unsupported(std::string(path_) + ": " + block +
                             ": written inline; expected the block form `accelerate config` writes (" + block +
                             ": then indented key: value lines)");
      }
      if (!inline_value.empty()) edits_.replace(head->line, head->written + ":" + comment(head->rest));
      std::vector<Entry> kids = children(block);
      const std::string indent = kids.empty() ? "  " : kids.front().indent;
      const bool sorted = std::is_sorted(kids.begin(), kids.end(),
                                         [](const Entry& a, const Entry& b) { return a.key < b.key; });
      for (const auto& [key, value] : sets) {
        auto existing = std::find_if(kids.begin(), kids.end(), [&](const Entry& e) { return e.key == key; });
        if (existing != kids.end()) {
          replace_value(*existing, value);
          continue;
        }
        size_t at = block_end(*head);
        if (sorted) {
          for (const Entry& kid : kids) {
            if (kid.key > key) {
              at = kid.line;
              break;
            }
          }
        }
        edits_.insert_before(at, {indent + key + ": " + value});
      }
    }
    return edits_.unified_diff(path_);
  }

 private:
  // A key plain, "double" or 'single' quoted (issue 37: a quoted key was
  // written a second time, which YAML readers refuse as a duplicate).
  inline static const std::string kKey = R"re((?:([A-Za-z_][A-Za-z0-9_]*)|"([A-Za-z_][A-Za-z0-9_]*)"|'([A-Za-z_][A-Za-z0-9_]*)'))re";

  struct Entry {
    std::string key;
    size_t line = 0;
    std::string rest;     // after the colon: value and comment
    std::string indent;   // children only
    std::string written;  // the key as the file writes it, quotes kept
    std::optional<size_t> value_line;  // `key:` with its value on the line below
  };

  // An entry at `line` from a match of `indent` (group 1 when `indented`),
  // kKey (plain, double or single quoted) and the rest after the colon.
  Entry entry(const std::smatch& m, size_t line, bool indented) const {
    const size_t k = indented ? 2 : 1;
    const std::string indent = indented ? m[1].str() : "";
    const std::string key = m[k].matched ? m[k].str() : m[k + 1].matched ? m[k + 1].str() : m[k + 2].str();
    const std::string written = m[k].matched ? key : m[k + 1].matched ? "\"" + key + "\"" : "'" + key + "'";
    Entry e{key, line, m[k + 3].str(), indent, written, std::nullopt};
    if (scalar(e.rest).empty()) e.value_line = scalar_line_below(line, indent.size());
    return e;
  }
  // The line below `key_line` holding its value (`key:` then `  value`): the
  // next non-blank, non-comment line, if it is indented deeper than
  // `key_indent` and a plain scalar (no mapping, no list).
  std::optional<size_t> scalar_line_below(size_t key_line, size_t key_indent) const {
    static const std::regex plain(R"(^\s+[^\s#\-][^:#]*(\s+#.*)?$)");
    const std::vector<std::string>& lines = edits_.lines();
    for (size_t i = key_line + 1; i < lines.size(); ++i) {
      const size_t first = lines[i].find_first_not_of(" \t");
      if (first == std::string::npos || lines[i][first] == '#') continue;
      if (first > key_indent && std::regex_match(lines[i], plain)) return i;
      return std::nullopt;
    }
    return std::nullopt;
  }
  std::string value_of(const Entry& e) const {
    return e.value_line ? scalar(edits_.lines()[*e.value_line]) : scalar(e.rest);
  }
  // A new value where the entry keeps its value, with the key as written and the comment kept.
  void replace_value(const Entry& e, const std::string& value) {
    if (e.value_line) {
      const std::string& below = edits_.lines()[*e.value_line];
      const std::string indent = below.substr(0, below.find_first_not_of(" \t"));
      edits_.replace(*e.value_line, indent + value + comment(below));
      return;
    }
    edits_.replace(e.line, e.indent + e.written + ": " + value + comment(e.rest));
  }

  static std::string comment(const std::string& rest) {
    static const std::regex pattern(R"(^[^#]*?(\s+#.*)$)");
    std::smatch m;
    return std::regex_match(rest, m, pattern) ? m[1].str() : "";
  }
  static std::string scalar(const std::string& rest) {
    std::string text = rest.substr(0, rest.size() - comment(rest).size());
    text.erase(0, text.find_first_not_of(" \t"));
    text.erase(text.find_last_not_of(" \t") + 1);
    if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') && text.back() == text.front()) {
      text = text.substr(1, text.size() - 2);
    }
    return text;
  }

  const Entry* find_top(const std::string& key) const {
    auto found = std::find_if(top_.begin(), top_.end(), [&](const Entry& e) { return e.key == key; });
    return found == top_.end() ? nullptr : &*found;
  }
  // The line after a block's last indented line.
  size_t block_end(const Entry& head) const {
    const std::vector<std::string>& lines = edits_.lines();
    size_t end = head.line + 1;
    for (size_t i = head.line + 1; i < lines.size(); ++i) {
      if (!lines[i].empty() && lines[i][0] != ' ' && lines[i][0] != '\t') break;
      if (lines[i].find_first_not_of(" \t") != std::string::npos) end = i + 1;
    }
    return end;
  }
  // The block's first-level keys: the lines at its first child's indent.
  std::vector<Entry> children(const std::string& block) const {
    std::vector<Entry> out;
    const Entry* head = find_top(block);
    if (head == nullptr) return out;
    const std::regex child("^([ \t]+)" + kKey + ":(.*)$");
    const std::vector<std::string>& lines = edits_.lines();
    const size_t end = block_end(*head);
    for (size_t i = head->line + 1; i < end; ++i) {
      std::smatch m;
      if (!std::regex_match(lines[i], m, child)) continue;
      if (!out.empty() && m[1].str() != out.front().indent) continue;  // deeper: a child's own keys
      out.push_back(entry(m, i, true));
    }
    return out;
  }
  // Where a new top-level key goes: before the first greater key when the
  // file's keys are sorted, else at the end.
  size_t top_position(const std::string& key) const {
    const bool sorted =
        std::is_sorted(top_.begin(), top_.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
    if (sorted) {
      for (const Entry& entry : top_) {
        if (entry.key > key) return entry.line;
      }
    }
    return edits_.lines().size();
  }

  LineEdits edits_;
  std::string path_;
  std::vector<Entry> top_;
  std::vector<std::pair<std::string, std::string>> top_sets_;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> child_sets_;
};

const char* device_name(Offload offload) {
  return offload == Offload::kCpu ? "cpu" : offload == Offload::kNvme ? "nvme" : "none";
}
const char* yes_no(bool value) { return value ? "true" : "false"; }

// The FSDP plugin's keys for the plan (accelerate/utils/dataclasses.py,
// FullyShardedDataParallelPlugin): FSDP1's sharding strategy, or FSDP2's
// reshard_after_forward; parameter offload; all-or-nothing checkpointing.
void write_fsdp(AccelerateYaml& yaml, const planner::Plan& plan, const planner::RunSettings& given,
                bool fsdp2, bool checkpoint, RecipePatch& patch) {
  const planner::GlobalConfig& c = plan.config;
  const bool new_block = yaml.value("distributed_type") != "FSDP";
  if (c.zero_stage == 1) {
    patch.notes.push_back("FSDP has no optimizer-only sharding (ZeRO-1): the plan is written as ZeRO-2's layout, "
                          "which shards gradients too and keeps less memory");
  }
  if (fsdp2) {
    if (new_block) yaml.set("fsdp_config", "fsdp_version", "2");
    if (new_block || c.zero_stage != given.zero_stage) {
      yaml.set("fsdp_config", "fsdp_reshard_after_forward", yes_no(c.zero_stage == 3));
    }
  } else if (new_block || c.zero_stage != given.zero_stage) {
    // HYBRID_SHARD keeps its replication across machines (accelerate/utils/constants.py).
    const std::string now = yaml.value("fsdp_config", "fsdp_sharding_strategy");
    const bool hybrid = now.rfind("HYBRID", 0) == 0 || now == "4" || now == "5";
    const char* strategy = c.zero_stage == 3 ? (hybrid ? "HYBRID_SHARD" : "FULL_SHARD")
                           : c.zero_stage == 0 ? "NO_SHARD"
                                               : (hybrid ? "HYBRID_SHARD_ZERO2" : "SHARD_GRAD_OP");
    yaml.set("fsdp_config", "fsdp_sharding_strategy", strategy);
  }
  // FSDP offloads parameters, gradients and the optimizer step together, only when fully sharded.
  const bool offload = c.offload_param == Offload::kCpu && c.offload_optimizer == Offload::kCpu && c.zero_stage == 3;
  if (offload || given.offload_param != Offload::kNone || new_block) {
    yaml.set("fsdp_config", "fsdp_offload_params", yes_no(offload));
  }
  if (!offload && (c.offload_optimizer != Offload::kNone || c.offload_param != Offload::kNone)) {
    patch.notes.push_back(std::string("the plan offloads ") +
                          (c.offload_param != Offload::kNone ? "parameters" : "the optimizer alone") + " to " +
                          (c.offload_optimizer == Offload::kNvme || c.offload_param == Offload::kNvme ? "NVMe" : "the CPU") +
                          " at ZeRO-" + std::to_string(c.zero_stage) +
                          ": FSDP offloads parameters and optimizer together to the CPU at full sharding, or nothing; "
                          "use the DeepSpeed plugin for this plan");
  }
  const bool was = given.checkpointing != planner::CheckpointPolicy::kNone;
  if (new_block || checkpoint != was) yaml.set("fsdp_config", "fsdp_activation_checkpointing", yes_no(checkpoint));
  if (new_block) {
    yaml.set("fsdp_config", "fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP");
    const std::string classes = transformer_layer_classes(plan);
    yaml.set("fsdp_config", "fsdp_transformer_layer_cls_to_wrap", classes);
    if (classes == kLayerClassPlaceholder) {
      patch.notes.push_back("set fsdp_config.fsdp_transformer_layer_cls_to_wrap to the model's layer class");
    }
  }
}

// The DeepSpeed plugin's keys `accelerate config` asks for
// (docs/source/usage_guides/deepspeed.md): stage, offload devices and
// accumulation, which `accelerate launch` exports as
// ACCELERATE_GRADIENT_ACCUMULATION_STEPS (accelerate/utils/launch.py) and so
// must match the script's. A plugin that names its own DeepSpeed file points at
// the plan's instead. Returns whether the file then says the accumulation.
bool write_deepspeed(AccelerateYaml& yaml, const planner::Plan& plan, const planner::RunSettings& given,
                     RecipePatch& patch) {
  const planner::GlobalConfig& c = plan.config;
  const bool new_block = yaml.value("distributed_type") != "DEEPSPEED";
  if (!new_block && yaml.has("deepspeed_config", "deepspeed_config_file")) {
    if (changes_deepspeed_config(c, given) || c.grad_accum != given.grad_accum || c.micro_batch != given.micro_batch) {
      yaml.set("deepspeed_config", "deepspeed_config_file", "ds_config.json");
      patch.notes.push_back(deepspeed_config_note(c));
    }
    return true;
  }
  if (new_block || c.zero_stage != given.zero_stage) {
    yaml.set("deepspeed_config", "zero_stage", std::to_string(c.zero_stage));
  }
  if (new_block || c.offload_optimizer != given.offload_optimizer) {
    yaml.set("deepspeed_config", "offload_optimizer_device", device_name(c.offload_optimizer));
  }
  if (new_block || c.offload_param != given.offload_param) {
    yaml.set("deepspeed_config", "offload_param_device", device_name(c.offload_param));
  }
  const bool accumulation = new_block || yaml.has("deepspeed_config", "gradient_accumulation_steps");
  if (accumulation) yaml.set("deepspeed_config", "gradient_accumulation_steps", std::to_string(c.grad_accum));
  if (c.offload_optimizer == Offload::kNvme || c.offload_param == Offload::kNvme) {
    patch.notes.push_back("NVMe offload needs its path: add deepspeed_config.offload_optimizer_nvme_path / "
                          "offload_param_nvme_path, or use --emit deepspeed and deepspeed_config_file");
  }
  return accumulation;
}

}  // namespace

Result<RecipePatch> accelerate_patch(const planner::Plan& plan, const planner::RunSettings& given,
                                     const std::vector<bool>& checkpointable, std::string_view yaml_text,
                                     std::string_view path) {
  RecipePatch patch;
  AccelerateYaml yaml(yaml_text, path);
  const planner::GlobalConfig& c = plan.config;
  std::string type = yaml.value("distributed_type");
  if (type.empty()) type = "NO";
  const bool checkpoint =
      checkpoint_every_layer(layer_choices(plan, checkpointable), patch.notes, "Accelerate's checkpointing");
  const bool was_checkpointing = given.checkpointing != planner::CheckpointPolicy::kNone;
  // Offload at ZeRO-0 is torchao's CPUOffloadOptimizer (planner/search/candidate_search.cc), which the script sets up.
  const bool offloads = c.offload_optimizer != Offload::kNone || c.offload_param != Offload::kNone;
  const bool sharded = c.zero_stage > 0 || (offloads && plan.settings.cpu_offload == planner::CpuOffloadImpl::kZeroOffload);
  bool fsdp_checkpointing = false;      // whether a key of this file says the checkpointing
  bool accumulation_in_file = false;    // ... and the accumulation
  if (type == "FSDP") {
    const bool fsdp2 = given.sharding == Sharding::kFsdp2;
    if (fsdp2 && c.zero_stage == 0) {
      // FSDP2 always shards; replicated parameters are DDP's.
      yaml.set("distributed_type", plan.settings.world_size() > 1 ? "MULTI_GPU" : "NO");
      patch.notes.push_back("ZeRO-0: FSDP2 cannot leave parameters unsharded; written as DDP (MULTI_GPU), whose "
                            "checkpointing is the script's");
    } else {
      write_fsdp(yaml, plan, given, fsdp2, checkpoint, patch);
      fsdp_checkpointing = true;
    }
  } else if (type == "DEEPSPEED") {
    accumulation_in_file = write_deepspeed(yaml, plan, given, patch);
  } else if (sharded) {
    // DDP (or one process) to a plugin: the one the plan was priced for (docs/stacks.md, "Sharding").
    const Sharding sharding = planner::sharding_of(plan.settings);
    if (sharding == Sharding::kDeepspeed) {
      yaml.set("distributed_type", "DEEPSPEED");
      accumulation_in_file = write_deepspeed(yaml, plan, given, patch);
    } else {
      yaml.set("distributed_type", "FSDP");
      write_fsdp(yaml, plan, given, sharding == Sharding::kFsdp2, checkpoint, patch);
      fsdp_checkpointing = true;
    }
  }
  // What an Accelerate config does not hold: the script's (or the Trainer's) keys.
  if (!fsdp_checkpointing && checkpoint != was_checkpointing) {
    patch.notes.push_back(std::string("checkpointing ") + (checkpoint ? "on" : "off") +
                          " is the script's, not the Accelerate config's: model.gradient_checkpointing_" +
                          (checkpoint ? "enable()" : "disable()") + ", or TrainingArguments' gradient_checkpointing "
                          "(--emit hf-args)");
  }
  if (c.micro_batch != given.micro_batch) {
    patch.notes.push_back("micro-batch " + std::to_string(c.micro_batch) +
                          " is the script's: the DataLoader's batch_size, or TrainingArguments (--emit hf-args)");
  }
  if (c.grad_accum != given.grad_accum && !accumulation_in_file) {
    patch.notes.push_back("accumulation " + std::to_string(c.grad_accum) +
                          " is the script's: Accelerator(gradient_accumulation_steps=), or TrainingArguments "
                          "(--emit hf-args)");
  }
  std::ostringstream text;
  if (!yaml.changed()) {
    text << "# the Accelerate config already runs the plan: no key to change\n";
  } else {
    Result<std::string> diff = yaml.diff();
    if (!diff.is_ok()) return diff.status();
    text << "# accelerate launch --config_file " << path << " after this patch:\n" << diff.value();
  }
  patch.text = text.str();
  return patch;
}

}  // namespace headroom::reports
