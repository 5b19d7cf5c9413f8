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

// Every tensor of one part ("model.pt", "optimizer.pt") of the newest
// checkpoint in `dir`.
inline std::map<std::string, torch::Tensor> checkpoint_part(const std::string& dir, const std::string& part) {
  StateStoreOptions options;
  options.directory = dir;
  auto loaded = StateStore(options).load_latest();
  REQUIRE(loaded.is_ok());
  REQUIRE(loaded->has_value());
  const std::string& bytes = loaded.value()->parts.at(part);
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

}  // namespace headroom::executor::run_test
