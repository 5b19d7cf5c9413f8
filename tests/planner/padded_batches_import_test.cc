// What each importer reads about the data's layout: unpacked samples padded per
// batch carry shortest_sample (the band's top replays batches of varied length);
// packed rows and batches padded to the cap do not.
#include <doctest/doctest.h>

#include <string>

#include "planner/configs/axolotl_import.h"
#include "planner/configs/hf_trainer_import.h"
#include "planner/configs/llamafactory_import.h"
#include "planner/configs/torchtune_import.h"

namespace headroom::planner {
namespace {

ConfigImport ok(Result<ConfigImport> imported) {
  REQUIRE_MESSAGE(imported.is_ok(), imported.message());
  return imported.value();
}

bool noted(const ConfigImport& imported, const std::string& words) {
  for (const std::string& note : imported.notes) {
    if (note.find(words) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("TRL's SFTConfig: unpacked batches from one token, packed or padding-free ones at the cap") {
  const ConfigImport unpacked = ok(import_training_arguments(R"({"max_length": 1024})", "args.json", RunSettings{}));
  CHECK(unpacked.settings.seq_len == 1024);
  CHECK(unpacked.settings.shortest_sample == 1);
  CHECK(noted(unpacked, "--shortest-sample N narrows it"));
  const ConfigImport packed =
      ok(import_training_arguments(R"({"max_length": 1024, "packing": true})", "args.json", RunSettings{}));
  CHECK_FALSE(packed.settings.shortest_sample);
  const ConfigImport padding_free =
      ok(import_training_arguments(R"({"max_length": 1024, "padding_free": true})", "args.json", RunSettings{}));
  CHECK_FALSE(padding_free.settings.shortest_sample);
  CHECK_FALSE(unpacked.settings.group_by_length);
  CHECK(ok(import_training_arguments(R"({"max_length": 1024, "group_by_length": true})", "args.json", RunSettings{}))
            .settings.group_by_length);
  // TrainingArguments alone say nothing of the data.
  CHECK_FALSE(ok(import_training_arguments(R"({"per_device_train_batch_size": 2})", "args.json", RunSettings{}))
                  .settings.shortest_sample);
}

TEST_CASE("axolotl: sample_packing false pads per batch unless pad_to_sequence_len pads every batch to the cap") {
  const ConfigImport unpacked = ok(import_axolotl_config("sequence_len: 2048\nsample_packing: false\n", "a.yml", {}));
  CHECK(unpacked.settings.shortest_sample == 1);
  CHECK(noted(unpacked, "sequence_len: samples are padded to the longest of each batch"));
  const ConfigImport to_cap = ok(import_axolotl_config(
      "sequence_len: 2048\nsample_packing: false\npad_to_sequence_len: true\n", "a.yml", {}));
  CHECK_FALSE(to_cap.settings.shortest_sample);
  CHECK_FALSE(noted(to_cap, "padded to the longest of each batch"));
  CHECK(noted(to_cap, "pad_to_sequence_len"));
  CHECK_FALSE(ok(import_axolotl_config("sequence_len: 2048\nsample_packing: true\n", "a.yml", {}))
                  .settings.shortest_sample);
}

TEST_CASE("LLaMA-Factory: sft pads per batch, pt packs unless packing says otherwise") {
  CHECK(ok(import_llamafactory_config("cutoff_len: 1024\n", "lf.yaml", RunSettings{})).settings.shortest_sample == 1);
  CHECK_FALSE(ok(import_llamafactory_config("stage: pt\ncutoff_len: 1024\n", "lf.yaml", RunSettings{}))
                  .settings.shortest_sample);
  CHECK(ok(import_llamafactory_config("stage: pt\npacking: false\n", "lf.yaml", RunSettings{}))
            .settings.shortest_sample == 1);
  CHECK_FALSE(ok(import_llamafactory_config("packing: true\n", "lf.yaml", RunSettings{})).settings.shortest_sample);
}

TEST_CASE("torchtune: dataset.packed false pads per batch (padded_collate_sft)") {
  const std::string yaml =
      "batch_size: 2\nmodel:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\ntokenizer:\n  max_seq_len: 2048\n"
      "optimizer:\n  _component_: torch.optim.AdamW\ndataset:\n  packed: ";
  const ConfigImport unpacked = ok(import_torchtune_config(yaml + "False\n", "c.yaml", {}, RunSettings{}));
  CHECK(unpacked.settings.shortest_sample == 1);
  const ConfigImport packed = ok(import_torchtune_config(yaml + "True\n", "c.yaml", {}, RunSettings{}));
  CHECK_FALSE(packed.settings.shortest_sample);
}

}  // namespace headroom::planner
