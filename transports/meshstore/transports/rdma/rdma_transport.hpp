#pragma once

// The rdma transport (libibverbs): the one-sided protocol (one_sided.hpp)
// across hosts. The volume registers each region's memory with its
// protection domain (a registration cache keyed by buffer, so the next
// version of a key in the same pooled memory reuses it) and describes the
// region with its address and remote key; the client connects reliable
// (RC) queue pairs to the volume through the server's actor (each side's
// QPN, LID, GID and PSN travel in one request and its answer), then moves
// the bytes with RDMA READ (get) and RDMA WRITE (put), chunked, spread over
// several queue pairs, completed by polling its completion queue. No CPU on
// the volume's side touches the bytes.
//
// Built when libibverbs-dev is present (MESHSTORE_WITH_RDMA=AUTO). Without a
// device (ibv_get_device_list finds none: this VM reports ENOSYS) the
// factory's `available` says why, volumes skip it (logged once per
// process), selection falls back, and `meshstore info` / `stat` print the
// reason. Environment: MESHSTORE_RDMA_DEVICE (device name, default the
// first), MESHSTORE_RDMA_PORT (default 1), MESHSTORE_RDMA_GID_INDEX (RoCE:
// the GID to use, default 0; InfiniBand uses the LID). See
// docs/transports.md, "rdma", for running on a cluster.

#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::rdma {

/// Whether this process can use RDMA: ok, or Errc::unavailable with the
/// reason ("no RDMA device: ibv_get_device_list found none (Function not
/// implemented)"). Probed once.
Status availability();

/// Whether this process moves GPU memory over RDMA without staging it
/// through host memory (GPUDirect RDMA): ok when RDMA and CUDA work and
/// the device registers GPU memory (a dma-buf exported by the CUDA driver,
/// or the nvidia-peermem module); else Errc::unavailable or unsupported
/// with the reason. Probed once, by registering 2 MiB of cuda:0.
Status gpudirect_availability();

/// The rdma transport's factory (name "rdma", priority 16: below shm and
/// cma, which serve pairs on one host, above tcp, so it carries pairs on
/// different hosts when both have a device).
TransportFactory rdma_factory();

}  // namespace meshstore::transports::rdma
