// The registration of the store's message types with CAF (add_actor_types).

#include "meshstore/protocol/actor_types.hpp"

#include <vector>

#include "meshstore/mesh_values.hpp"
#include "meshstore/protocol/controller_actor.hpp"
#include "meshstore/protocol/directory_actor.hpp"
#include "meshstore/protocol/records.hpp"
#include "meshstore/protocol/storage_volume_actor.hpp"
#include "meshstore/protocol/strategy_actor.hpp"
#include "meshstore/protocol/wire_glue.hpp"
#include "meshstore/transports/rpc/rpc_transport.hpp"
#include "meshstore/transports/transport.hpp"
#include "meshstore/transports/wire/region_ref.hpp"

namespace meshstore::protocol {

void add_actor_types(caf::actor_system_config& cfg) {
  // The wire structs (records and RegionRef). Their names are part of the
  // protocol: a process registering another name cannot talk to this one.
  // A list of records travels as one KeyRecordList encoding (wire_glue.hpp).
  // Before KeyRecord: registering a type registers its std::vector too,
  // and the first name given a type is the one CAF keeps.
  cfg.add_message_type<std::vector<wire::KeyRecord>>("meshstore::wire::KeyRecordList");
  cfg.add_message_type<wire::KeyRecord>("meshstore::wire::KeyRecord");
  cfg.add_message_type<wire::StageRequest>("meshstore::wire::StageRequest");
  cfg.add_message_type<wire::RegionRef>("meshstore::wire::RegionRef");
  cfg.add_message_type<wire::ReadLease>("meshstore::wire::ReadLease");
  cfg.add_message_type<wire::RemoveReply>("meshstore::wire::RemoveReply");
  cfg.add_message_type<wire::VolumeInfo>("meshstore::wire::VolumeInfo");
  cfg.add_message_type<wire::VolumeStat>("meshstore::wire::VolumeStat");
  cfg.add_message_type<wire::ClientInfo>("meshstore::wire::ClientInfo");
  cfg.add_message_type<wire::HeldRecords>("meshstore::wire::HeldRecords");
  cfg.add_message_type<transports::EndpointInfo>("meshstore::transports::EndpointInfo");
  // The actor handles keep the names they had in meshstore::actors: a
  // name is the wire's, not the C++ namespace's.
  cfg.add_message_type<storage_volume_actor>("meshstore::actors::storage_volume_actor");
  cfg.add_message_type<controller_actor>("meshstore::actors::controller_actor");
  cfg.add_message_type<strategy_actor>("meshstore::actors::strategy_actor");
  cfg.add_message_type<directory_actor>("meshstore::actors::directory_actor");
  cfg.add_message_type<transports::rpc::rpc_endpoint_actor>(
      "meshstore::transports::rpc::rpc_endpoint_actor");
  cfg.add_message_type<std::vector<wire::VolumeInfo>>("std::vector<meshstore::wire::VolumeInfo>");
  cfg.add_message_type<std::vector<wire::StageRequest>>(
      "std::vector<meshstore::wire::StageRequest>");
  cfg.add_message_type<std::vector<wire::RegionRef>>("std::vector<meshstore::wire::RegionRef>");
  cfg.add_message_type<std::vector<transports::EndpointInfo>>(
      "std::vector<meshstore::transports::EndpointInfo>");
  // Every type above crosses processes through CAF's serializer, which
  // alters floats (mesh_values.hpp, Exact): none may hold one, checked at
  // compile time down to each member, in the interfaces' messages too.
  meshstore::internal::refuse_bare_floats<wire::KeyRecord, wire::StageRequest, wire::RegionRef,
                                          wire::ReadLease, wire::RemoveReply, wire::VolumeInfo,
                                          wire::VolumeStat, wire::ClientInfo, wire::HeldRecords,
                                          transports::EndpointInfo>();
  meshstore::internal::refuse_floats_in_interface<storage_volume_actor>();
  meshstore::internal::refuse_floats_in_interface<controller_actor>();
  meshstore::internal::refuse_floats_in_interface<strategy_actor>();
  meshstore::internal::refuse_floats_in_interface<directory_actor>();
  meshstore::internal::refuse_floats_in_interface<transports::rpc::rpc_endpoint_actor>();
}

}  // namespace meshstore::protocol
