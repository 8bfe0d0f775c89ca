// save_sharded: ranks (threads here, exchanging through memory) write their
// boxes into one consolidated checkpoint, which reads back as the whole
// tensors; failures leave no file a reader would accept.

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/checkpoint.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

namespace st = safetensors;
using testing::TempDir;

// An all-gather among `world` threads: round by round, each rank's bytes
// to every rank. `fail_round` (from 1) answers an error to every rank
// instead, as a collective whose peer died does.
class Exchange {
 public:
  explicit Exchange(std::int64_t world, int fail_round = 0)
      : world_(world), fail_round_(fail_round) {}

  AllGather for_rank(std::int64_t rank) {
    return [this, rank](const std::string& mine) { return gather(rank, mine); };
  }

 private:
  Result<std::vector<std::string>> gather(std::int64_t rank, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& round = rounds_[calls_[rank]++];
    if (static_cast<int>(calls_[rank]) == fail_round_) {
      return Status(Errc::unavailable, "rank 1 is gone");
    }
    round.resize(static_cast<std::size_t>(world_));
    round[static_cast<std::size_t>(rank)] = mine;
    ++arrived_[&round];
    cv_.notify_all();
    const bool all =
        cv_.wait_for(lock, std::chrono::seconds(30), [&] { return arrived_[&round] == world_; });
    if (!all) return Status(Errc::timeout, "the other ranks did not arrive");
    return round;
  }

  std::int64_t world_;
  int fail_round_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::int64_t, std::size_t> calls_;
  std::map<std::size_t, std::vector<std::string>> rounds_;
  std::map<const std::vector<std::string>*, std::int64_t> arrived_;
};

// A global tensor whose byte j holds (j * 13 + seed) % 251.
Tensor global(DType dtype, const Shape& shape, int seed) {
  auto t = Tensor::empty(dtype, shape).value();
  auto* p = static_cast<std::uint8_t*>(t.data());
  for (std::uint64_t j = 0; j < t.nbytes(); ++j) {
    p[j] = static_cast<std::uint8_t>((j * 13 + static_cast<std::uint64_t>(seed)) % 251);
    if (dtype == DType::boolean) p[j] &= 1;
  }
  return t;
}

// Rank `rank`'s box of `whole` under `p`, copied into a tensor of its own.
Tensor box_of(const Tensor& whole, const Placement& p, std::int64_t rank) {
  auto box = p.slice_for(whole.shape(), rank).value();
  auto out = Tensor::empty(whole.dtype(), box.local_shape()).value();
  if (box.empty()) return out;
  const Strides strides = contiguous_strides(whole.shape());
  std::int64_t first = 0;
  for (std::size_t d = 0; d < strides.size(); ++d) first += box.offsets()[d] * strides[d];
  const TensorView part(static_cast<std::byte*>(const_cast<void*>(whole.data())) +
                            first * static_cast<std::int64_t>(dtype_size(whole.dtype())),
                        whole.dtype(), box.local_shape(), strides);
  EXPECT_OK(copy_into(part, out.view()));
  return out;
}

struct Case {
  std::string name;
  Tensor whole;
  Placement placement;
};

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = d ? ::readdir(d) : nullptr) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  if (d) ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Runs save_sharded on `world` threads; each rank's status.
std::vector<Status> save_all(const std::string& dir, const std::vector<Case>& cases,
                             std::int64_t world, ShardedSaveOptions options, Exchange& ex,
                             const std::function<void(std::int64_t, StateDict&)>& edit = {}) {
  std::vector<Status> out(static_cast<std::size_t>(world));
  std::vector<std::thread> ranks;
  for (std::int64_t r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      StateDict local;
      std::map<std::string, Placement> placements;
      for (const auto& c : cases) {
        EXPECT_OK(local.insert(c.name, box_of(c.whole, c.placement, r)));
        placements.emplace(c.name, c.placement);
      }
      if (edit) edit(r, local);
      auto o = options;
      o.all_gather = ex.for_rank(r);
      auto report = save_sharded(dir, local, placements, r, world, o);
      out[static_cast<std::size_t>(r)] = report.ok() ? Status() : report.status();
    });
  }
  for (auto& t : ranks) t.join();
  return out;
}

void expect_whole(const std::string& dir, const std::vector<Case>& cases) {
  auto c = st::open_checkpoint(dir);
  ASSERT_OK(c);
  ASSERT_EQ(c->weight_map.size(), cases.size());
  for (const auto& k : cases) {
    auto v = c->files[c->weight_map.at(k.name)].view(k.name);
    ASSERT_OK(v);
    EXPECT_EQ(v->shape(), k.whole.shape()) << k.name;
    EXPECT_EQ(v->dtype(), k.whole.dtype()) << k.name;
    EXPECT_TRUE(k.whole.nbytes() == 0 ||
                std::memcmp(v->data(), k.whole.data(), k.whole.nbytes()) == 0)
        << k.name;
  }
}

Placement on(Shape mesh, std::vector<DimPlacement> dims) {
  return Placement::make(std::move(mesh), std::move(dims)).value();
}

TEST(ShardedSave, RowColumnAndReplicatedBoxesMakeTheWholeTensors) {
  TempDir dir;
  const auto S = DimPlacement::shard;
  const auto R = DimPlacement::replicate;
  const std::vector<Case> cases = {
      {"rows", global(DType::float32, {6, 4}, 1), on({2}, {S(0)})},
      {"cols", global(DType::bfloat16, {5, 6}, 2), on({2}, {S(1)})},
      {"uneven", global(DType::int64, {5, 3}, 3), on({2}, {S(0)})},
      {"shared", global(DType::float16, {7}, 4), on({2}, {R()})},
      {"scalar", global(DType::float32, {}, 5), on({2}, {R()})},
      {"mask", global(DType::boolean, {3, 4, 2}, 6), on({2}, {S(1)})},
      {"empty", global(DType::float32, {0, 4}, 7), on({2}, {S(0)})},
  };
  Exchange ex(2);
  for (const auto& s : save_all(dir.path(), cases, 2, {}, ex)) ASSERT_OK(s);
  expect_whole(dir.path(), cases);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(ShardedSave, ATwoDimensionalMeshWithFilesByNameWritesTheIndex) {
  TempDir dir;
  const auto S = DimPlacement::shard;
  const auto R = DimPlacement::replicate;
  const std::vector<Case> cases = {
      {"grid", global(DType::float32, {8, 6}, 1), on({2, 2}, {S(0), S(1)})},
      {"twice", global(DType::int32, {9, 2}, 2), on({2, 2}, {S(0), S(0)})},
      {"half", global(DType::bfloat16, {4, 5}, 3), on({2, 2}, {R(), S(1)})},
      {"all", global(DType::uint8, {3}, 4), on({2, 2}, {R(), R()})},
  };
  ShardedSaveOptions o;
  o.file_of = {{"grid", 1}, {"twice", 2}, {"half", 1}, {"all", 2}};
  o.metadata = {{"format", "pt"}};
  Exchange ex(4);
  for (const auto& s : save_all(dir.path(), cases, 4, o, ex)) ASSERT_OK(s);
  expect_whole(dir.path(), cases);
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                            "model-00002-of-00002.safetensors",
                                                            "model.safetensors.index.json"}));
  auto c = st::open_checkpoint(dir.path()).value();
  EXPECT_EQ(c.files[c.weight_map.at("half")].path(), dir.file("model-00001-of-00002.safetensors"));
  EXPECT_EQ(c.files[0].header().metadata.at("format"), "pt");
}

TEST(ShardedSave, ThreeRanksSplitByMaxShardBytesAndStridedLocals) {
  TempDir dir;
  const auto S = DimPlacement::shard;
  std::vector<Case> cases;
  for (int i = 0; i < 5; ++i) {
    cases.push_back(
        {"layer." + std::to_string(i), global(DType::float32, {10, 7}, i), on({3}, {S(i % 2)})});
  }
  ShardedSaveOptions o;
  o.max_shard_bytes = 2 * 10 * 7 * 4;  // two tensors a file
  Exchange ex(3);
  // Rank 2 passes its first tensor as a transposed view of a copy.
  Tensor transposed;
  StateDict before;  // the tensors the rest of rank 2's views borrow
  auto statuses = save_all(dir.path(), cases, 3, o, ex, [&](std::int64_t r, StateDict& local) {
    if (r != 2) return;
    const auto& e = local.entries().front();
    const Shape shape = e.view.shape();
    transposed = Tensor::empty(e.view.dtype(), {shape[1], shape[0]}).value();
    const TensorView t(transposed.data(), e.view.dtype(), shape, {1, shape[0]});
    ASSERT_OK(copy_into(e.view, t));
    StateDict again;
    for (const auto& x : local.entries()) {
      ASSERT_OK(again.insert(x.name, x.name == e.name ? t : x.view));
    }
    before = std::move(local);
    local = std::move(again);
  });
  for (const auto& s : statuses) ASSERT_OK(s);
  expect_whole(dir.path(), cases);
  EXPECT_EQ(files_in(dir.path()).size(), 4u);  // three files and the index
}

TEST(ShardedSave, ARankWithBadInputFailsEveryRankAndNothingIsWritten) {
  TempDir dir;
  const std::vector<Case> cases = {
      {"w", global(DType::float32, {4, 4}, 1), on({2}, {DimPlacement::shard(0)})}};
  Exchange ex(2);
  auto statuses = save_all(dir.path(), cases, 2, {}, ex, [](std::int64_t r, StateDict& local) {
    if (r == 1) {
      ASSERT_OK(local.insert("step", Value::int64(3)));
    }
  });
  EXPECT_ERROR(statuses[1], Errc::invalid_argument, "(rank 1): 'step' is a value");
  EXPECT_ERROR(statuses[0], Errc::invalid_argument, "rank 1 cannot save: 'step' is a value");
  EXPECT_TRUE(files_in(dir.path()).empty());

  // Local shapes that no placement explains: rank 1 holds 3 rows, so the
  // tensor has 5, of which torch.chunk gives rank 0 three, not two.
  Exchange ex2(2);
  statuses = save_all(dir.path(), cases, 2, {}, ex2, [](std::int64_t r, StateDict& local) {
    if (r != 1) return;
    StateDict other;
    ASSERT_OK(other.insert("w", Tensor::empty(DType::float32, {3, 4}).value()));
    local = std::move(other);
  });
  for (const auto& s : statuses) {
    EXPECT_ERROR(s, Errc::invalid_argument,
                 "'w': rank 0 holds [2, 4], but [Shard(0)] on (2) of [5, 4] gives it [3, 4]");
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(ShardedSave, AnExchangeThatFailsAtTheBarrierLeavesNoFileAReaderAccepts) {
  TempDir dir;
  const std::vector<Case> cases = {
      {"w", global(DType::float32, {64, 32}, 1), on({2}, {DimPlacement::shard(1)})}};
  Exchange ex(2, /*fail_round=*/2);  // after the writes, before the renames
  for (const auto& s : save_all(dir.path(), cases, 2, {}, ex)) {
    EXPECT_ERROR(s, Errc::unavailable, "rank 1 is gone");
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
  EXPECT_FALSE(st::open_checkpoint(dir.path()).ok());
}

TEST(ShardedSave, AnIndexThatCannotBeWrittenTakesTheRenamedFilesBack) {
  TempDir dir;
  // A directory where the index's temporary goes: writing it fails.
  const std::string blocker =
      dir.file(std::string(st::kIndexName) + ".tmp." + std::to_string(::getpid()));
  ASSERT_EQ(::mkdir(blocker.c_str(), 0755), 0);
  const auto S = DimPlacement::shard;
  const std::vector<Case> cases = {{"a", global(DType::float32, {4, 4}, 1), on({2}, {S(0)})},
                                   {"b", global(DType::float32, {4, 4}, 2), on({2}, {S(1)})}};
  ShardedSaveOptions o;
  o.max_shard_bytes = 64;  // a file each
  Exchange ex(2);
  for (const auto& s : save_all(dir.path(), cases, 2, o, ex)) {
    EXPECT_ERROR(s, Errc::io_error, st::kIndexName);
  }
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{std::string(st::kIndexName) + ".tmp." +
                                                           std::to_string(::getpid())});
}

TEST(ShardedSave, ALaterSaveRemovesAKilledSavesTemporaries) {
  TempDir dir;
  std::ofstream(dir.file("model.safetensors.tmp.dead.123")) << "torn";
  const std::vector<Case> cases = {
      {"w", global(DType::float32, {4}, 1), on({1}, {DimPlacement::shard(0)})}};
  Exchange ex(1);
  for (const auto& s : save_all(dir.path(), cases, 1, {}, ex)) ASSERT_OK(s);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"model.safetensors"});
  expect_whole(dir.path(), cases);
}

TEST(ShardedSave, BadArgumentsAreNamed) {
  TempDir dir;
  StateDict local;
  ASSERT_OK(local.insert("w", Tensor::empty(DType::float32, {2}).value()));
  std::map<std::string, Placement> p{{"w", on({2}, {DimPlacement::shard(0)})}};
  EXPECT_ERROR(save_sharded(dir.path(), local, p, 2, 2), Errc::invalid_argument,
               "rank 2 is not in a world of 2");
  EXPECT_ERROR(save_sharded(dir.path(), local, p, 0, 2), Errc::invalid_argument,
               "needs all_gather");
  EXPECT_ERROR(save_sharded(dir.path(), local, p, 0, 1), Errc::invalid_argument,
               "has 2 ranks, the world 1");
  EXPECT_ERROR(save_sharded(dir.path(), local, {}, 0, 1), Errc::invalid_argument,
               "'w' has no placement");
  p = {{"w", on({1}, {DimPlacement::shard(0)})}};
  EXPECT_ERROR(save_sharded(dir.file("none"), local, p, 0, 1), Errc::invalid_argument,
               "is not a directory");
  ShardedSaveOptions o;
  o.file_of = {{"w", 2}};
  EXPECT_ERROR(save_sharded(dir.path(), local, p, 0, 1, o), Errc::invalid_argument,
               "file_of uses 1 of files 1..2");
  EXPECT_TRUE(files_in(dir.path()).empty());
}

}  // namespace
}  // namespace meshstore
