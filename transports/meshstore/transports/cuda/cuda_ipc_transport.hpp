#pragma once
// The cuda-ipc transport (docs/gpu.md): on one host, objects put from GPU
// memory stay in GPU memory of the volume's process, and a client reads or
// writes them with one device-to-device copy through a CUDA IPC handle
// (opened once per object and cached). Host objects move as over shm (the
// client maps the volume's shared-memory segments), so one transport serves
// both. Needs CUDA in both processes, the same host and the same user.
// Built in every build (it goes through meshstore's own CUDA calls) and
// offered where CUDA works; StoreOptions::transport.name = "cuda-ipc" selects
// it (automatic selection prefers shm).
#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::cuda_ipc {

/// The cuda-ipc transport's factory (name "cuda-ipc").
TransportFactory cuda_ipc_factory();

}  // namespace meshstore::transports::cuda_ipc
