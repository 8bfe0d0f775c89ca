#pragma once

// The cma transport: cross-memory attach, the one-sided protocol
// (one_sided.hpp) on one host. The volume describes each region with its
// address in the volume's process; the client reads it with
// process_vm_readv and writes it with process_vm_writev, straight between
// its buffer and the volume's memory: one copy, by the kernel, and no code
// on the volume's side per byte. Like rdma, and unlike shm, nothing is
// mapped and any memory will do (StoreOptions::transport.shared_memory_volumes=false).
//
// It serves a client and a volume on the same host, in the same pid
// namespace, running as the same user; the kernel must let the client
// attach (ptrace access: kernel.yama.ptrace_scope 0, or 1 with the
// volume's PR_SET_PTRACER_ANY, which the server sets). Selected when shm
// is off or cannot serve (priority 18: below shm, above rdma and tcp), or forced.
// Errors: EPERM (another user, a ptrace policy) -> Errc::unavailable naming
// the cause; ESRCH (the volume's process is gone, or a new process has its
// pid) -> Errc::unavailable; EFAULT on the volume's side (a region no longer
// mapped) -> Errc::not_found.

#include "meshstore/transports/registry.hpp"

namespace meshstore::transports::cma {

/// The cma transport's factory (name "cma").
TransportFactory cma_factory();

}  // namespace meshstore::transports::cma
