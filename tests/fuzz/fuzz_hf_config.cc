// libFuzzer target: Hugging Face config.json ingestion (graph_from_hf_config).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "graph/graph_json.h"
#include "models/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = headroom::graph::parse_json_text(text, "config.json");
  if (!json.is_ok()) return 0;
  // Huge but valid sizes are legal configs; building them is slow, not wrong.
  // Keep the fuzzer on the parsing and validation paths.
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                          "head_dim", "num_key_value_heads"}) {
    if (json->is_object() && json->contains(key) && json->at(key).is_number() && json->at(key).get<double>() > 4096) {
      return 0;
    }
  }
  (void)headroom::models::graph_from_hf_config(json.value(), "config.json", headroom::models::ZooOptions{});
  return 0;
}
