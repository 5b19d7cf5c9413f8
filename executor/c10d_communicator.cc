#include "executor/c10d_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <thread>
#include <vector>

namespace headroom::executor {
namespace {

// Runs one collective and waits for it. A peer that closed its connection or
// stayed silent past the timeout raises (Gloo's gloo::IoException, NCCL's
// DistBackendError), both derived from std::exception.
template <typename Issue>
Status run(const std::string& group, const char* collective, Issue issue, bool await_release) {
  try {
    c10::intrusive_ptr<c10d::Work> work = issue();
    work->wait();
    if (await_release) {
      // Gloo's worker thread drops its reference to a finished work just after
      // marking it complete (ProcessGroupGloo::runLoop, workInProgress_). Until
      // then the work keeps the tensors it was handed, so a buffer freed after
      // the call would stay live for a moment that depends on the thread: wait
      // for that reference (microseconds) so memory is freed when this returns.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (work.use_count() > 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::runtime(std::string(collective) + ": " + e.what() +
                           " (expected every rank of the job alive and in " + "the same " + group +
                           " collective)");
  }
}

class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> backend,
                   std::string name, StageTensor to_group)
      : store_(std::move(store)),
        backend_(std::move(backend)),
        name_(std::move(name)),
        to_group_(std::move(to_group)),
        await_release_(name_ == "gloo") {}
  int rank() const override { return backend_->getRank(); }
  int world_size() const override { return backend_->getSize(); }

  Status all_reduce_sum(at::Tensor& tensor) override {
    std::vector<at::Tensor> tensors{staged(tensor)};
    Status s = run(name_, "all_reduce", [&] { return backend_->allreduce(tensors); }, await_release_);
    return s.is_ok() ? back(tensors[0], tensor) : s;
  }
  Status reduce_scatter_sum(const at::Tensor& input, at::Tensor& output) override {
    if (input.numel() != output.numel() * world_size()) {
      return Status::internal(
          "reduce_scatter: expected an input of " + std::to_string(world_size()) + " x " +
          std::to_string(output.numel()) + " elements, got " + std::to_string(input.numel()));
    }
    at::Tensor flat_input = staged(input.contiguous().view({-1}));
    at::Tensor flat_output = staged(output.view({-1}));
    Status s = run(
        name_, "reduce_scatter", [&] { return backend_->_reduce_scatter_base(flat_output, flat_input); },
        await_release_);
    return s.is_ok() ? back(flat_output, output) : s;
  }
  Status all_gather(const at::Tensor& input, at::Tensor& output) override {
    if (output.numel() != input.numel() * world_size()) {
      return Status::internal("all_gather: expected an output of " + std::to_string(world_size()) +
                              " x " + std::to_string(input.numel()) + " elements, got " +
                              std::to_string(output.numel()));
    }
    at::Tensor flat_input = staged(input.contiguous().view({-1}));
    at::Tensor flat_output = staged(output.view({-1}));
    Status s = run(name_, "all_gather", [&] { return backend_->_allgather_base(flat_output, flat_input); }, await_release_);
    return s.is_ok() ? back(flat_output, output) : s;
  }
  Status broadcast(at::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{staged(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    Status s = run(name_, "broadcast", [&] { return backend_->broadcast(tensors, options); }, await_release_);
    return s.is_ok() ? back(tensors[0], tensor) : s;
  }
  Status barrier() override {
    return run(name_, "barrier", [&] { return backend_->barrier(); }, await_release_);
  }

 private:
  // The tensor where the group computes: itself, or a device copy.
  at::Tensor staged(const at::Tensor& tensor) const { return to_group_ ? to_group_(tensor) : tensor; }
  // Results computed on a copy land in the caller's tensor.
  static Status back(const at::Tensor& computed, at::Tensor& target) {
    if (!computed.is_same(target)) target.copy_(computed.view(target.sizes()));
    return Status::ok();
  }

  c10::intrusive_ptr<c10d::Store> store_;  // rank 0 serves it: it must outlive the group
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::string name_;
  StageTensor to_group_;
  // Gloo only: NCCL's watchdog keeps finished works for a while by design.
  bool await_release_;
};

}  // namespace

std::unique_ptr<Communicator> c10d_communicator(c10::intrusive_ptr<c10d::Store> store,
                                                c10::intrusive_ptr<c10d::Backend> backend, std::string name,
                                                StageTensor to_group) {
  return std::make_unique<C10dCommunicator>(std::move(store), std::move(backend), std::move(name), std::move(to_group));
}

c10::intrusive_ptr<c10d::Store> rendezvous_store(const Rendezvous& rendezvous, c10::intrusive_ptr<c10d::Store>* raw) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(rendezvous.master_port);
  options.isServer = rendezvous.rank == 0;
  options.numWorkers = rendezvous.world_size;
  options.waitWorkers = false;  // the group's own rendezvous waits for every rank
  options.timeout = rendezvous.timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(rendezvous.master_addr, options);
  if (raw != nullptr) *raw = tcp;
  // Each group on keys of its own: two groups on one raw store race.
  return c10::make_intrusive<c10d::PrefixStore>("headroom/", tcp);
}

Status rendezvous_error(const Rendezvous& rendezvous, const std::string& why) {
  return Status::runtime(
      "rendezvous at " + rendezvous.master_addr + ":" + std::to_string(rendezvous.master_port) +
      " as rank " + std::to_string(rendezvous.rank) + " of " +
      std::to_string(rendezvous.world_size) + ": " + why +
      " (expected every rank started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE "
      "within the timeout)");
}

}  // namespace headroom::executor
