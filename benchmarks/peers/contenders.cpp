// peer_bench's contenders, described: what each does and how it is set up,
// for results.md (see contenders.hpp).
#include "contenders.hpp"

#include <string>

namespace meshstore::bench {

std::string describe(const std::string& contender) {
  if (contender == "memcpy") return "memcpy in one process on one core (the one-copy limit)";
  if (contender == "memcpy-all-cores") {
    return "memcpy in one process split evenly by bytes over every core (the host's copy "
           "bandwidth)";
  }
  if (contender == "tcp") return "raw TCP stream on loopback, TCP_NODELAY, one send per tensor";
  if (contender == "safetensors-shm") {
    return "A writes a safetensors file in /dev/shm (meshstore's writer), B maps it and copies";
  }
  if (contender == "redis") {
    return "Redis 7 on a unix socket, persistence off: A SETs 4 MiB pieces, B GETs them, both "
           "pipelined 16 at a time (hiredis)";
  }
  if (contender == "gloo") {
    return "torch.distributed, gloo backend, on loopback (Debian python3-torch): A sends every "
           "tensor with one batch_isend_irecv, B receives into its own tensors the same way "
           "(peer_gloo.py; one intra-op thread each)";
  }
  if (contender == "mpi") {
#if MESHSTORE_HAVE_MPI
    return std::string(
               "Open MPI: one MPI_Isend per tensor, B pre-posts one MPI_Irecv each, "
               "MPI_Waitall (peer_mpi; mpirun ") +
           kMpiSettings + ": shared memory, single copy through CMA where permitted)";
#else
    return "Open MPI (not built)";
#endif
  }
  if (contender == "meshstore") {
    return "meshstore as it picks for the pair: the publishing mode (Store::publish, "
           "PublishMode::automatic: direct on one host) and the transport; A publishes, B reads "
           "it (get_next_state_dict_into); A's reclaim of the version before its next step is "
           "timed with the round";
  }
  if (contender == "meshstore-direct") {
    return "meshstore direct publishing (Store::publish, PublishMode::direct): B copies the "
           "large tensors straight out of A's own buffers (cma on one host), the small ones from "
           "a packed copy; A's reclaim is timed with the round";
  }
  if (contender == "meshstore-revocable") {
    return "meshstore-direct with revoke_on_timeout (a loan A can end at reclaim_timeout): B "
           "closes each read of A's buffers with a checked round trip to the volume, which "
           "tells it whether the loan was revoked meanwhile";
  }
  if (contender == "meshstore-copy") {
    return "meshstore publishing by copy (Store::publish, PublishMode::copy, as "
           "publish_state_dict): A copies into the volume's shared memory, B streams it out";
  }
  if (contender == "meshstore-python") {
    return "meshstore from Python (import meshstore, torch tensors through DLPack), the "
           "transport the store picks: A publishes (publish_state_dict), B streams it into its "
           "own tensors (get_next_state_dict_into) (peer_meshstore.py; one intra-op thread "
           "each)";
  }
  if (contender == "meshstore-inplace") {
    return "meshstore zero-copy publishing, the transport the store picks: A produces each "
           "version straight into the store's staged shared memory (stage_publish; producing "
           "is untimed, as every contender's is) and commits; B reads it "
           "(get_next_state_dict_into)";
  }
  return "meshstore with " + transport_of(contender) +
         " forced: A publishes (publish_state_dict), B streams it (get_next_state_dict_into)";
}

}  // namespace meshstore::bench
