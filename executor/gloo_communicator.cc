#include "executor/gloo_communicator.h"

#include <exception>

#include "executor/c10d_communicator.h"
#include "executor/gloo_backend.h"

namespace headroom::executor {

Result<std::unique_ptr<Communicator>> connect_gloo(const Rendezvous& rendezvous) {
  try {
    c10::intrusive_ptr<c10d::Store> tcp;
    c10::intrusive_ptr<c10d::Store> store = rendezvous_store(rendezvous, &tcp);
    const bool one_machine = rendezvous.master_addr == "127.0.0.1" || rendezvous.master_addr == "localhost";
    c10::intrusive_ptr<c10d::Backend> backend =
        make_gloo_backend(store, rendezvous.rank, rendezvous.world_size, rendezvous.timeout, one_machine);
    return c10d_communicator(tcp, backend, "gloo");
  } catch (const std::exception& e) {
    return rendezvous_error(rendezvous, e.what());
  }
}

}  // namespace headroom::executor
