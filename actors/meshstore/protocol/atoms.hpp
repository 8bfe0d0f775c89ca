#pragma once

// Message atoms of the store's actors. Atoms are verbs; CAF limits their
// text to 10 characters, so the C++ names are longer than the atom text.

#include <caf/all.hpp>

namespace meshstore::protocol {

using register_volume_atom = caf::atom_constant<caf::atom("reg_volume")>;
using volume_atom = caf::atom_constant<caf::atom("volume")>;
using volumes_atom = caf::atom_constant<caf::atom("volumes")>;
using notify_put_atom = caf::atom_constant<caf::atom("notify_put")>;
using notify_put_batch_atom = caf::atom_constant<caf::atom("notify_pb")>;
using evict_atom = caf::atom_constant<caf::atom("evict")>;
// A publisher lends its own buffers to its process's lending volume.
using lend_atom = caf::atom_constant<caf::atom("lend")>;
using ring_attach_atom = caf::atom_constant<caf::atom("ring_att")>;
using fast_commit_atom = caf::atom_constant<caf::atom("f_commit")>;
using local_commit_atom = caf::atom_constant<caf::atom("l_commit")>;
using small_attach_atom = caf::atom_constant<caf::atom("small_att")>;
using small_op_atom = caf::atom_constant<caf::atom("small_op")>;
using locate_atom = caf::atom_constant<caf::atom("locate")>;
using keys_atom = caf::atom_constant<caf::atom("keys")>;
using exists_atom = caf::atom_constant<caf::atom("exists")>;
using remove_atom = caf::atom_constant<caf::atom("remove")>;
using remove_batch_atom = caf::atom_constant<caf::atom("remove_b")>;
using counters_atom = caf::atom_constant<caf::atom("counters")>;
using replace_atom = caf::atom_constant<caf::atom("replace")>;
using put_shards_atom = caf::atom_constant<caf::atom("put_shard")>;
using stream_open_atom = caf::atom_constant<caf::atom("st_open")>;
using stream_progress_atom = caf::atom_constant<caf::atom("st_prog")>;
using stream_abort_atom = caf::atom_constant<caf::atom("st_abort")>;
using stream_subscribe_atom = caf::atom_constant<caf::atom("st_sub")>;
using stream_event_atom = caf::atom_constant<caf::atom("st_event")>;
// A client asks to hear of volume deaths; the controller tells it of each.
using watch_volumes_atom = caf::atom_constant<caf::atom("watch_vols")>;
using volume_gone_atom = caf::atom_constant<caf::atom("vol_gone")>;
using stream_expire_atom = caf::atom_constant<caf::atom("st_expire")>;
using rebuild_end_atom = caf::atom_constant<caf::atom("rebuilt")>;
using store_stream_atom = caf::atom_constant<caf::atom("s_stream")>;
using store_counters_atom = caf::atom_constant<caf::atom("s_counters")>;
using stage_atom = caf::atom_constant<caf::atom("stage")>;
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using held_records_atom = caf::atom_constant<caf::atom("held_recs")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using reconnected_atom = caf::atom_constant<caf::atom("reconnectd")>;
using expect_volumes_atom = caf::atom_constant<caf::atom("expect_vol")>;
// A volume's commits waiting for a new controller: their deadline passed.
using commits_wait_atom = caf::atom_constant<caf::atom("cmt_wait")>;
// Copies of whole keys (StoreOptions::replicas): a volume copies objects
// of another volume (copy_from), tells itself a copy ended (copied), and
// the controller paces what it makes again after a volume died (repair).
using copy_from_atom = caf::atom_constant<caf::atom("copy_from")>;
using copied_atom = caf::atom_constant<caf::atom("copied")>;
using repair_atom = caf::atom_constant<caf::atom("repair")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using retire_atom = caf::atom_constant<caf::atom("retire")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using discard_atom = caf::atom_constant<caf::atom("discard")>;
using open_read_atom = caf::atom_constant<caf::atom("open_read")>;
using close_read_atom = caf::atom_constant<caf::atom("close_read")>;
using revoke_atom = caf::atom_constant<caf::atom("revoke")>;
using reclaim_atom = caf::atom_constant<caf::atom("reclaim")>;
using stat_atom = caf::atom_constant<caf::atom("stat")>;
using locate_pinned_atom = caf::atom_constant<caf::atom("locate_pin")>;
using unpin_atom = caf::atom_constant<caf::atom("unpin")>;
using locate_latest_atom = caf::atom_constant<caf::atom("loc_latest")>;
using endpoints_atom = caf::atom_constant<caf::atom("endpoints")>;
using select_atom = caf::atom_constant<caf::atom("select")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
// To a client: every volume it may be given has registered (spawn_store,
// once every process joined), so the strategy's "none fits" is final.
using placement_final_atom = caf::atom_constant<caf::atom("plc_final")>;
using store_get_atom = caf::atom_constant<caf::atom("s_get")>;
using store_keys_atom = caf::atom_constant<caf::atom("s_keys")>;
using store_list_atom = caf::atom_constant<caf::atom("s_list")>;
using store_exists_atom = caf::atom_constant<caf::atom("s_exists")>;
using store_remove_atom = caf::atom_constant<caf::atom("s_remove")>;
using store_stat_atom = caf::atom_constant<caf::atom("s_stat")>;
using store_latest_atom = caf::atom_constant<caf::atom("s_latest")>;

}  // namespace meshstore::protocol
