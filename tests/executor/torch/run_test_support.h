// Shared by the tests that run the trainer and read what it left
// (trainer_test.cc, data_parallel_test.cc) or start ranks on this machine
// (communicator_test.cc, data_parallel_test.cc).
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <string>

#include "executor/state_store.h"

namespace headroom::executor::run_test {

// A loopback port the kernel just handed out, free again once the socket
// closes: where rank 0 of a test job serves its store.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

inline std::map<std::string, torch::Tensor> archive_tensors(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  std::map<std::string, torch::Tensor> out;
  for (const std::string& key : archive.keys()) {
    torch::Tensor t;
    archive.read(key, t);
    out[key] = t;
  }
  return out;
}

// Every tensor of one part ("model.pt", "optimizer.pt") of the newest
// checkpoint in `dir`. A sharded run's checkpoint holds each rank's slices in
// "<kind>.rank-R-of-N.pt" instead (executor/sharded_checkpoint.h): they are put
// together here, independently of the executor's own assembly, as
// "slices/<parameter>/<state>" at "slices/<parameter>/begin" of a parameter
// of "slices/<parameter>/shape" ("value": the parameter itself).
inline std::map<std::string, torch::Tensor> checkpoint_part(const std::string& dir, const std::string& part) {
  StateStoreOptions options;
  options.directory = dir;
  auto loaded = StateStore(options).load_latest();
  REQUIRE(loaded.is_ok());
  REQUIRE(loaded->has_value());
  const auto& parts = loaded.value()->parts;
  if (parts.count(part)) return archive_tensors(parts.at(part));
  const std::string kind = part.substr(0, part.find('.'));
  std::map<std::string, torch::Tensor> out;
  std::map<std::string, int64_t> written;
  int ranks = 0;
  for (const auto& [name, bytes] : parts) {
    if (name.rfind(kind + ".rank-", 0) != 0) continue;
    ++ranks;
    const auto tensors = archive_tensors(bytes);
    for (const auto& [key, tensor] : tensors) {
      if (key.rfind("slices/", 0) != 0) {
        if (key != "rank" && key != "world") out[key] = tensor;
        continue;
      }
      const std::string rest = key.substr(7);
      const std::string parameter = rest.substr(0, rest.rfind('/'));
      const std::string state = rest.substr(rest.rfind('/') + 1);
      if (state == "begin" || state == "shape") continue;
      const torch::Tensor shape = tensors.at("slices/" + parameter + "/shape");
      const std::vector<int64_t> sizes(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel());
      const std::string whole = state == "value" ? parameter : parameter + "/" + state;
      if (!out.count(whole)) out[whole] = torch::zeros(sizes, tensor.options());
      const int64_t begin = tensors.at("slices/" + parameter + "/begin").item<int64_t>();
      out[whole].view(-1).narrow(0, begin, tensor.numel()).copy_(tensor);
      written[whole] += tensor.numel();
    }
  }
  REQUIRE_MESSAGE(ranks > 0, dir << " holds neither " << part << " nor rank parts of it");
  for (const auto& [key, count] : written) CHECK_MESSAGE(count == out.at(key).numel(), key);
  return out;
}

}  // namespace headroom::executor::run_test
