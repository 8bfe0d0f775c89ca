#pragma once

// Safetensors checkpoints in and out of a store (docs/persistence.md):
// load a checkpoint's tensors as keys, save the keys under a prefix as a
// checkpoint, or read tensors (or a box of one: a rank's shard) straight
// into the caller's buffers. Peak memory stays about one copy of the
// weights: tensors move from the file's mapping into the store's regions,
// and from the store's regions into the output file's pages, and the
// pages of the file already read are let go.
//
// These calls block the calling thread until done (they are file tools);
// the store's own calls inside them run in parallel.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "meshstore/safetensors.hpp"
#include "meshstore/state_dict.hpp"
#include "meshstore/store.hpp"
#include "meshstore/tensor_slice.hpp"

namespace meshstore {

/// What load_checkpoint loads, under which keys, and how.
struct LoadOptions {
  /// Tensor T is stored as key "PREFIX/T" ("" = as "T").
  std::string prefix;
  /// Only these tensors (empty = all); a name not in the checkpoint is
  /// Errc::not_found.
  std::vector<std::string> names;
  /// Only the tensors whose name starts with this.
  std::string name_prefix;
  /// Bytes put in flight together: the mapping's pages read for them are
  /// released after each batch.
  std::uint64_t batch_bytes = std::uint64_t{256} << 20;
  /// Called with the bytes put so far, of the total: at the start and after each batch.
  safetensors::Progress progress;
  /// How long each batch's put may take.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

/// What a load or a save moved.
struct CheckpointReport {
  std::size_t tensors = 0;  ///< Tensors moved (save_sharded: the boxes this rank wrote).
  std::uint64_t bytes = 0;  ///< Bytes of tensor data moved (save_sharded: this rank's).
  std::size_t files = 0;    ///< Safetensors files read or written (the index not counted).
};

/// Puts the tensors of the checkpoint at `path` (a file or a directory,
/// safetensors::open_checkpoint) into `store`. Every file is validated
/// before anything is put. Keys are put in batches; a failure stops the
/// load and names the tensor (keys already put stay).
Result<CheckpointReport> load_checkpoint(Store& store, const std::string& path,
                                         const LoadOptions& options = {});

/// How save_checkpoint and save_state_dict write a checkpoint.
struct SaveCheckpointOptions {
  /// Largest tensor bytes per file (0 = one file, model.safetensors);
  /// above it, model-0000i-of-0000n.safetensors and the index.
  std::uint64_t max_shard_bytes = 0;
  /// Written into every file's `__metadata__`.
  std::map<std::string, std::string> metadata;
  /// Called with the tensor bytes saved so far, of the total.
  safetensors::Progress progress;
  /// save_checkpoint: how long each call to the store may take.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

/// Saves every tensor key under `prefix` ("" = the whole store) into the
/// directory `dir` (created if missing), named relative to the prefix: key
/// "P/T" becomes tensor "T", so load then save returns the original names.
/// Each file is written under a temporary name and renamed when complete;
/// each tensor is read by get_into straight into the file's pages. Byte
/// objects are skipped. When `prefix` holds a state dict (put_state_dict),
/// it is saved as one (save_state_dict of get_state_dict(prefix): entry
/// names, values and packed entries included; one copy in memory); any
/// other key equal to the prefix is refused (it has no name relative to
/// it). Errc::not_found when no tensor is under `prefix`.
Result<CheckpointReport> save_checkpoint(Store& store, const std::string& prefix,
                                         const std::string& dir,
                                         const SaveCheckpointOptions& options = {});

// -- state dicts --------------------------------------------------------------

/// Writes a state dict as a checkpoint at `path`: with max_shard_bytes 0 the
/// file `path` itself, else the directory `path` with shards and the index
/// (as save_checkpoint). Tensors keep their names. Values, which
/// safetensors has no type for, are stored as tensors (int64, float64 and
/// bool as 0-dim I64, F64 and BOOL; bytes and strings as U8) and marked in
/// the metadata ("meshstore.value.NAME" = "int64", "float64", "bool",
/// "bytes" or "string"), so load_state_dict gives them back as values
/// while other readers see plain tensors. GPU tensors are copied straight
/// into the file's pages.
Result<CheckpointReport> save_state_dict(const StateDict& sd, const std::string& path,
                                         const SaveCheckpointOptions& options = {});

/// Reads a whole checkpoint (safetensors::open_checkpoint) into a state
/// dict of owned tensors, in file and offset order, and the values
/// save_state_dict marked. One copy from the page cache; pages released
/// as it goes.
Result<StateDict> load_state_dict(const std::string& path);

/// Fills the caller's state dict from a checkpoint: every entry of `sd`
/// by name (a tensor: its bytes, or with `boxes` only that box of the
/// stored tensor; a value: a value save_state_dict marked). Entries are
/// checked first (missing names, dtypes, shapes, all named in one error)
/// and nothing is written on error. Names the checkpoint has and `sd` has
/// not are left alone. Entries may be GPU memory (docs/gpu.md): each is
/// one copy from the file's pages (a box is cut on the host first);
/// Errc::unavailable where CUDA cannot be used.
Status read_state_dict_into(const safetensors::Checkpoint& checkpoint, StateDict& sd,
                            const std::map<std::string, TensorSlice>& boxes = {});

/// Copies tensor `name` of `checkpoint` into `dst` (shape and dtype of the
/// tensor, any strides, host or GPU memory), or with `box` only that box of
/// it (dst: the box's shape): a rank loads just its shard. Errc::not_found, dtype_mismatch,
/// shape_mismatch or out_of_range, naming the tensor.
Status read_tensor_into(const safetensors::Checkpoint& checkpoint, const std::string& name,
                        const TensorView& dst, const TensorSlice* box = nullptr);

// -- a sharded save: every rank writes its boxes into the final files --------

/// How the ranks of a sharded save exchange bytes: every rank calls it
/// with its own bytes, the same number of times in the same order, and it
/// answers every rank's bytes in rank order (torch.distributed's
/// all_gather_object, an MPI allgather, ...). An error (a rank gone) fails
/// the save.
using AllGather = std::function<Result<std::vector<std::string>>(const std::string& mine)>;

/// How save_sharded cuts the checkpoint into files and how the ranks talk.
struct ShardedSaveOptions {
  /// Largest tensor bytes per file (as SaveCheckpointOptions); 0 = one
  /// file. Ignored when file_of is given.
  std::uint64_t max_shard_bytes = 0;
  /// Which file each tensor goes to, numbered from 1 (torchtitan's
  /// fqn_to_index_mapping): every tensor named, files 1..N each used.
  std::map<std::string, std::size_t> file_of;
  std::map<std::string, std::string> metadata;  ///< Written into every file's `__metadata__`.
  /// Required when world > 1.
  AllGather all_gather;
  /// This rank's bytes written so far, of its total.
  safetensors::Progress progress;
};

/// Saves a state dict sharded over `world` ranks as one consolidated
/// checkpoint in `dir` (which must exist): full tensors in
/// model-0000i-of-0000n.safetensors with model.safetensors.index.json, or
/// one model.safetensors. Every rank calls it with its local tensors
/// (`local`: this rank's box of each tensor, any strides, host or GPU
/// memory) and each tensor's placement (the same on every rank; its mesh
/// has `world` ranks; `rank`'s coordinates are row-major). No gather and
/// no second pass:
/// - the ranks exchange their local shapes and dtypes once; every rank
///   derives the same global shapes (torch.chunk's split) and plans the
///   same files, headers and offsets (rank 0's tensor order);
/// - each rank writes its boxes at their offsets with pwrite (a row shard
///   is one run, other boxes one run per row of their trailing dimensions),
///   into temporary files named after the final ones; a box held by
///   several ranks (Replicate) is written by the first of them only;
/// - once every rank has flushed its writes, rank 0 renames the files into
///   place and writes the index; every rank returns after that.
/// A failure on any rank (bad input, a write, the exchange) fails the save
/// on every rank that can still hear of it, and the temporaries are
/// removed: no file a reader would accept is left, as after a rank killed
/// mid-save (its temporaries stay under their temporary names).
/// Errc::invalid_argument for bad input (a rank's named), io_error for the
/// file system.
Result<CheckpointReport> save_sharded(const std::string& dir, const StateDict& local,
                                      const std::map<std::string, Placement>& placements,
                                      std::int64_t rank, std::int64_t world,
                                      const ShardedSaveOptions& options = {});

}  // namespace meshstore
