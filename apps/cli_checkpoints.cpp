// meshstore inspect, load and save: safetensors checkpoints, read and
// written with a progress bar.

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"
#include "meshstore/checkpoint.hpp"
#include "meshstore/safetensors.hpp"

namespace meshstore::cli {

using namespace std::chrono_literals;

int cmd_inspect(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("inspect", argc, argv, {}, args, rc)) return rc;
  if (args.positional.size() != 1) return usage_error("inspect", "names one file or directory");
  auto c = meshstore::safetensors::open_checkpoint(args.positional[0]);
  if (!c.ok()) {
    std::fprintf(stderr, "meshstore inspect: %s\n", c.status().to_string().c_str());
    return 1;
  }
  std::size_t tensors = 0;
  const std::string index = c->root + "/" + meshstore::safetensors::kIndexName;
  struct stat sb {};
  if (c->files.size() > 1 || ::stat(index.c_str(), &sb) == 0) {
    std::printf("index %s: %zu tensor(s) in %zu file(s)\n", index.c_str(), c->weight_map.size(),
                c->files.size());
  }
  for (const auto& f : c->files) {
    std::printf("%s (%s, %zu tensor(s))\n", f.path().c_str(), human_bytes(f.size()).c_str(),
                f.header().tensors.size());
    for (const auto& [k, v] : f.header().metadata) {
      std::printf("  metadata %s = %s\n", k.c_str(), v.c_str());
    }
    std::printf("  %-56s %-8s %-20s %12s\n", "TENSOR", "DTYPE", "SHAPE", "BYTES");
    // In name order, as users look them up.
    std::vector<const meshstore::safetensors::TensorInfo*> sorted;
    for (const auto& t : f.header().tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return a->name < b->name; });
    for (const auto* t : sorted) {
      std::printf("  %-56s %-8s %-20s %12llu\n", t->name.c_str(),
                  std::string(meshstore::dtype_safetensors_name(t->dtype)).c_str(),
                  meshstore::shape_to_string(t->shape).c_str(),
                  static_cast<unsigned long long>(t->nbytes()));
    }
    tensors += f.header().tensors.size();
  }
  std::printf("total: %zu tensor(s) in %zu file(s), %s (%llu bytes)\n", tensors, c->files.size(),
              human_bytes(c->total_bytes).c_str(), static_cast<unsigned long long>(c->total_bytes));
  return 0;
}

int cmd_load(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("load", argc, argv, with_tls({"store", "prefix", "log-level"}), args, rc))
    return rc;
  if (args.positional.size() != 1) return usage_error("load", "names one file or directory");
  auto store = dial(args, 120s);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore load: %s\n", store.status().to_string().c_str());
    return 1;
  }
  meshstore::LoadOptions o;
  o.prefix = args.get("prefix", "");
  o.progress = progress_bar("load");
  auto r = meshstore::load_checkpoint(*store, args.positional[0], o);
  if (!r.ok()) {
    std::fprintf(stderr, "meshstore load: %s\n", r.status().to_string().c_str());
    return 1;
  }
  std::printf("loaded %zu tensor(s), %s, from %zu file(s)%s\n", r->tensors,
              human_bytes(r->bytes).c_str(), r->files,
              o.prefix.empty() ? "" : (" under '" + o.prefix + "/'").c_str());
  return 0;
}

int cmd_save(int argc, char** argv) {
  Args args;
  int rc = 0;
  if (!parse_args("save", argc, argv, with_tls({"store", "max-shard-size", "log-level"}), args,
                  rc)) {
    return rc;
  }
  if (args.positional.size() != 2) return usage_error("save", "wants PREFIX DIR");
  meshstore::SaveCheckpointOptions o;
  if (auto m = args.get("max-shard-size", ""); !m.empty()) {
    auto size = meshstore::safetensors::parse_size(m);
    if (!size.ok()) return usage_error("save", "--max-shard-size: " + size.status().message());
    o.max_shard_bytes = *size;
  }
  auto store = dial(args, 120s);
  if (!store.ok()) {
    std::fprintf(stderr, "meshstore save: %s\n", store.status().to_string().c_str());
    return 1;
  }
  o.progress = progress_bar("save");
  auto r = meshstore::save_checkpoint(*store, args.positional[0], args.positional[1], o);
  if (!r.ok()) {
    std::fprintf(stderr, "meshstore save: %s\n", r.status().to_string().c_str());
    return 1;
  }
  std::printf("saved %zu tensor(s), %s, into %zu file(s) in %s\n", r->tensors,
              human_bytes(r->bytes).c_str(), r->files, args.positional[1].c_str());
  return 0;
}

}  // namespace meshstore::cli
