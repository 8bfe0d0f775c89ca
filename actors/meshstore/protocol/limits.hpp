#pragma once

// Every size that picks a route or a way to copy on the data path, in one
// place, each with the measurement or limit that set it
// (docs/internals/data-path.md, "The thresholds"). Those marked "route" choose
// between two ways to the same answer; issue 48 removes them as the routes
// merge. Those marked "copy" choose how to move bytes and stay.

#include <cstddef>
#include <cstdint>

namespace meshstore::protocol::limits {

/// Route: objects a ring read serves at most (fast_get): a ring slot
/// (this plus 64 bytes) holds the reply. (Across hosts a get over the
/// channel takes what one message of it carries: 1 MiB less the reply's
/// header.) Copy: a put's objects of at most
/// this many bytes may travel inside its commit request; larger ones are
/// written into staged objects first (the same commit either way).
inline constexpr std::uint64_t kRingReadBytes = std::uint64_t{60} << 10;

/// Copy: a state dict's direct snapshot (FastPath::read_together) of at
/// most this many bytes in all is copied on the thread that planned it:
/// the caller's, or the client actor's after a locate (a version read),
/// which a longer copy would hold up for every other call of the process.
/// A larger one is copied on the client's waiting thread (FastPath::defer)
/// and its caller answered from there: the same route at any size.
/// Route: the largest get across hosts that a caller's thread checks over
/// its channel and reads with the transport's bulk read (FastPath::read);
/// a larger one goes through the actors, off the caller's thread, where a
/// cancel can stop it.
inline constexpr std::uint64_t kSnapshotHereBytes = std::uint64_t{8} << 20;

/// Copy: on the actors' path (what no channel takes), calls moving at
/// most this many bytes in all carry them inside their control messages
/// (stage, open_read) instead of a transfer: the same requests, one round
/// trip each way instead of three.
inline constexpr std::uint64_t kInlineBytes = std::uint64_t{64} << 10;

/// Route: a state dict put is announced as a stream (readers copy each
/// object once it is filled) only when the objects besides its largest
/// hold at least this many bytes. Below it the stream's messages cost the
/// put more than a reader gains (about 0.1 ms of a 1,000 x 4 KiB put
/// across processes, where the copies take 0.3 ms).
inline constexpr std::uint64_t kStreamMinOverlapBytes = std::uint64_t{1} << 20;

/// What a client keeps staged ahead for its next state dict puts: bytes a
/// state dict, and state dicts (a trainer's few, put every step). The
/// bytes also bound a state dict put sent over tcp from the caller's thread
/// (which waits for the network meanwhile): a larger one is sent from the
/// client's waiting thread (FastPath::defer).
inline constexpr std::uint64_t kStagedAheadBytes = std::uint64_t{16} << 20;
inline constexpr std::size_t kStagedAheadCount = 4;

/// Copy: below this many bytes an object is copied by one thread;
/// above, one thread per this many, up to the copy engine's. Splitting a
/// smaller copy costs more in wake-ups than it saves.
inline constexpr std::uint64_t kSplitBytesPerThread = std::uint64_t{1} << 20;

/// Copy: a put's tensors are copied into the volume's mapped objects in
/// batches of about this many bytes, one CopyEngine::copy_all_here each (a
/// model's tensors of a few MiB keep every thread busy at once); a
/// streamed put's readers are told of each batch as it lands.
inline constexpr std::uint64_t kWriteBatchBytes = std::uint64_t{64} << 20;

/// Copies of whole keys: the most volumes one key may be kept on
/// (StorePlacement::replicas, PutOptions::replicas).
inline constexpr std::uint32_t kMaxCopies = 16;

}  // namespace meshstore::protocol::limits
