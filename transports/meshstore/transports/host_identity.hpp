#pragma once

#include <string>

#include "meshstore/status.hpp"

namespace meshstore::transports {

/// This process's host identity for transport selection: two processes with
/// the same identity share a kernel, a network namespace and a /dev/shm, so
/// shared memory and loopback reach between them. Built from the kernel's
/// boot id, the network namespace and the /dev/shm mount (not the hostname,
/// which containers and misconfigured hosts share). Computed once; cheap.
const std::string& host_identity();

/// Ok when `host_id` (an endpoint's) is this process's host identity, else
/// Errc::unsupported saying the volume is on another host: the check of
/// the transports that serve one host only (shm, cma).
Status same_host(const std::string& host_id);

}  // namespace meshstore::transports
