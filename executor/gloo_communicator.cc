#include "executor/gloo_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>
#include <vector>

#include "executor/gloo_backend.h"

namespace headroom::executor {
namespace {

// Runs one collective and waits for it. Gloo reports a peer that closed its
// connection or stayed silent past the timeout as gloo::IoException, which
// derives from std::exception (its type is not visible without gloo's headers).
template <typename Issue>
Status run(const char* collective, Issue issue) {
  try {
    c10::intrusive_ptr<c10d::Work> work = issue();
    work->wait();
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::error(std::string(collective) + ": " + e.what() +
                         " (expected every rank of the job alive and in the same collective)");
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> backend)
      : store_(std::move(store)), backend_(std::move(backend)) {}
  int rank() const override { return backend_->getRank(); }
  int world_size() const override { return backend_->getSize(); }

  Status all_reduce_sum(at::Tensor& tensor) override {
    std::vector<at::Tensor> tensors{tensor};
    return run("all_reduce", [&] { return backend_->allreduce(tensors); });
  }
  Status reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) override {
    if (input.numel() != output.numel() * world_size()) {
      return Status::error("reduce_scatter: expected an input of " + std::to_string(world_size()) + " x " +
                           std::to_string(output.numel()) + " elements, got " + std::to_string(input.numel()));
    }
    at::Tensor flat_input = input.contiguous().view({-1});
    at::Tensor flat_output = output.view({-1});
    return run("reduce_scatter", [&] { return backend_->_reduce_scatter_base(flat_output, flat_input); });
  }
  Status all_gather(const at::Tensor& input, at::Tensor& output) override {
    if (output.numel() != input.numel() * world_size()) {
      return Status::error("all_gather: expected an output of " + std::to_string(world_size()) + " x " +
                           std::to_string(input.numel()) + " elements, got " + std::to_string(output.numel()));
    }
    at::Tensor flat_input = input.contiguous().view({-1});
    at::Tensor flat_output = output.view({-1});
    return run("all_gather", [&] { return backend_->_allgather_base(flat_output, flat_input); });
  }
  Status broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return run("broadcast", [&] { return backend_->broadcast(tensors, options); });
  }
  Status barrier() override {
    return run("barrier", [&] { return backend_->barrier(); });
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;  // rank 0 serves it: it must outlive the group
  c10::intrusive_ptr<c10d::Backend> backend_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> connect_gloo(const Rendezvous& rendezvous) {
  const std::string where = rendezvous.master_addr + ":" + std::to_string(rendezvous.master_port);
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(rendezvous.master_port);
    options.isServer = rendezvous.rank == 0;
    options.numWorkers = rendezvous.world_size;
    options.waitWorkers = false;  // the group's own rendezvous below waits for every rank
    options.timeout = rendezvous.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(rendezvous.master_addr, options);
    // Each group on a store of its own keys: two groups on one raw store race.
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::PrefixStore>("headroom/", tcp);
    const bool one_machine = rendezvous.master_addr == "127.0.0.1" || rendezvous.master_addr == "localhost";
    c10::intrusive_ptr<c10d::Backend> backend =
        make_gloo_backend(store, rendezvous.rank, rendezvous.world_size, rendezvous.timeout, one_machine);
    return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(tcp, backend));
  } catch (const std::exception& e) {
    return Status::error("rendezvous at " + where + " as rank " + std::to_string(rendezvous.rank) + " of " +
                         std::to_string(rendezvous.world_size) + ": " + e.what() +
                         " (expected every rank started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE "
                         "within the timeout)");
  }
}

}  // namespace headroom::executor
