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
#include <string>
#include <vector>

#include "meshstore/safetensors.hpp"
#include "meshstore/store.hpp"

namespace meshstore {

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
  safetensors::Progress progress;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

/// What a load or a save moved.
struct CheckpointReport {
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;
  std::size_t files = 0;
};

/// Puts the tensors of the checkpoint at `path` (a file or a directory,
/// safetensors::open_checkpoint) into `store`. Every file is validated
/// before anything is put. Keys are put in batches; a failure stops the
/// load and names the tensor (keys already put stay).
Result<CheckpointReport> load_checkpoint(Store& store, const std::string& path,
                                         const LoadOptions& options = {});

struct SaveCheckpointOptions {
  /// Largest tensor bytes per file (0 = one file, model.safetensors);
  /// above it, model-0000i-of-0000n.safetensors and the index.
  std::uint64_t max_shard_bytes = 0;
  std::map<std::string, std::string> metadata;
  safetensors::Progress progress;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

/// Saves every tensor key under `prefix` ("" = the whole store) into the
/// directory `dir` (created if missing), named relative to the prefix: key
/// "P/T" becomes tensor "T", so load then save returns the original names.
/// Each file is written under a temporary name and renamed when complete;
/// each tensor is read by get_into straight into the file's pages. Byte
/// objects are skipped; a key equal to the prefix is refused (it has no
/// name relative to it). Errc::not_found when no tensor is under `prefix`.
Result<CheckpointReport> save_checkpoint(Store& store, const std::string& prefix,
                                         const std::string& dir,
                                         const SaveCheckpointOptions& options = {});

/// Copies tensor `name` of `checkpoint` into `dst` (shape and dtype of the
/// tensor, any strides), or with `box` only that box of it (dst: the box's
/// shape): a rank loads just its shard. Errc::not_found, dtype_mismatch,
/// shape_mismatch or out_of_range, naming the tensor.
Status read_tensor_into(const safetensors::Checkpoint& checkpoint, const std::string& name,
                        const TensorView& dst, const TensorSlice* box = nullptr);

}  // namespace meshstore
