#pragma once

// The transport settings a store's volumes and client get from its
// StoreOptions (StoreOptions::validate() lives in options.cpp).

#include "meshstore/store.hpp"
#include "meshstore/transports/transport.hpp"

namespace meshstore::store {

/// The transport settings of `o`; validate() checks them and the volumes
/// and client get them.
transports::TransportConfig transport_config(const StoreOptions& o);

}  // namespace meshstore::store
