// The transports built into this binary. Each transport target contributes
// one factory; the optional one (rdma) joins here through CMake when built.
#include "meshstore/transports/cma/cma_transport.hpp"
#include "meshstore/transports/cuda/cuda_ipc_transport.hpp"
#include "meshstore/transports/registry.hpp"
#include "meshstore/transports/rpc/rpc_transport.hpp"
#include "meshstore/transports/shm/shm_transport.hpp"
#include "meshstore/transports/tcp/tcp_transport.hpp"
#if MESHSTORE_HAVE_RDMA
#include "meshstore/transports/rdma/rdma_transport.hpp"
#endif

namespace meshstore::transports {

TransportRegistry& builtin_registry() {
  static TransportRegistry* registry = [] {
    auto* r = new TransportRegistry();  // never destroyed: used until exit
    (void)r->add(rpc::rpc_factory());
    (void)r->add(shm::shm_factory());
    (void)r->add(tcp::tcp_factory());
    (void)r->add(cma::cma_factory());
#if MESHSTORE_HAVE_RDMA
    (void)r->add(rdma::rdma_factory());
#endif
    (void)r->add(cuda_ipc::cuda_ipc_factory());  // offered where CUDA works
    return r;
  }();
  return *registry;
}

}  // namespace meshstore::transports
