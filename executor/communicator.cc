#include "executor/communicator.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace headroom::executor {
namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status all_reduce_sum(at::Tensor&) override { return Status::ok(); }
  Status reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) override {
    if (input.numel() != output.numel()) {
      return Status::internal(
          "reduce_scatter: expected the output to hold the whole input on one process");
    }
    output.copy_(input.view(output.sizes()));
    return Status::ok();
  }
  Status all_gather(const at::Tensor& input, at::Tensor& output) override {
    if (input.numel() != output.numel()) {
      return Status::internal(
          "all_gather: expected the output to hold just the input on one process");
    }
    output.copy_(input.view(output.sizes()));
    return Status::ok();
  }
  Status broadcast(at::Tensor&, int root) override {
    return root == 0 ? Status::ok()
                     : Status::internal("broadcast: root " + std::to_string(root) + " of 1 rank");
  }
  Status barrier() override { return Status::ok(); }
};

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

Result<int> whole_number(const char* name, const std::string& text, int low, int high) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    return Status::invalid_input("environment: " + std::string(name) + "=\"" + text +
                                 "\": expected a whole number in [" + std::to_string(low) + ", " +
                                 std::to_string(high) + "]");
  }
  return value;
}

}  // namespace

std::unique_ptr<Communicator> single_process_communicator() { return std::make_unique<SingleProcess>(); }

Result<Rendezvous> rendezvous_from_environment() {
  Rendezvous out;
  const std::optional<std::string> rank = environment("RANK");
  const std::optional<std::string> world = environment("WORLD_SIZE");
  const std::optional<std::string> addr = environment("MASTER_ADDR");
  const std::optional<std::string> port = environment("MASTER_PORT");
  if (!rank && !world && !addr && !port) return out;
  // torchrun sets all four; a partial set is a launch mistake, not one process.
  for (const auto& [name, value] : {std::pair{"RANK", rank}, std::pair{"WORLD_SIZE", world},
                                    std::pair{"MASTER_ADDR", addr}, std::pair{"MASTER_PORT", port}}) {
    if (!value) {
      return Status::invalid_input(
          std::string("environment: ") + name +
          ": not set, while other torchrun variables are (expected RANK, WORLD_SIZE, "
          "MASTER_ADDR and MASTER_PORT together, or none for one process)");
    }
  }
  constexpr int kMaxRanks = 1 << 16;
  Result<int> world_size = whole_number("WORLD_SIZE", *world, 1, kMaxRanks);
  if (!world_size.is_ok()) return world_size.status();
  Result<int> rank_value = whole_number("RANK", *rank, 0, world_size.value() - 1);
  if (!rank_value.is_ok()) return rank_value.status();
  Result<int> port_value = whole_number("MASTER_PORT", *port, 1, 65535);
  if (!port_value.is_ok()) return port_value.status();
  if (addr->empty())
    return Status::invalid_input(
        "environment: MASTER_ADDR: empty (expected a host name or address)");
  out.rank = rank_value.value();
  out.world_size = world_size.value();
  out.local_rank = out.rank;
  if (const std::optional<std::string> local = environment("LOCAL_RANK")) {
    Result<int> local_value = whole_number("LOCAL_RANK", *local, 0, world_size.value() - 1);
    if (!local_value.is_ok()) return local_value.status();
    out.local_rank = local_value.value();
  }
  out.master_addr = *addr;
  out.master_port = port_value.value();
  return out;
}

}  // namespace headroom::executor
