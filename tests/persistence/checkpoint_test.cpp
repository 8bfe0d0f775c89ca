// Checkpoints in and out of a store: load, save (one file or shards with an
// index), the names relative to the prefix both ways, a bit-exact round
// trip store -> files -> store, and a rank reading just its box.

#include "meshstore/checkpoint.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "meshstore/tensor.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

namespace st = safetensors;
using testing::kWait;

using testing::TempDir;

// Distinct bytes for every tensor: byte j of a tensor named n holds
// (j * 13 + n.size()) % 253.
Tensor filled(DType dtype, const Shape& shape, const std::string& name) {
  auto t = Tensor::empty(dtype, shape).value();
  auto* p = static_cast<std::uint8_t*>(t.data());
  for (std::uint64_t j = 0; j < t.nbytes(); ++j) {
    p[j] = static_cast<std::uint8_t>((j * 13 + name.size()) % 253);
    if (dtype == DType::boolean) p[j] &= 1;
  }
  return t;
}

bool same_bytes(const Tensor& a, const TensorView& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

TEST(Checkpoint, StoreToFilesToStoreIsBitExactWithNamesRelativeToThePrefix) {
  auto store = Store::embedded().value();
  std::map<std::string, Tensor> model;
  const std::vector<std::pair<std::string, std::pair<DType, Shape>>> specs = {
      {"embed.weight", {DType::bfloat16, {64, 48}}},
      {"layers.0.attn.q", {DType::float32, {48, 48}}},
      {"layers.0.norm", {DType::float16, {48}}},
      {"step", {DType::int64, {}}},
      {"mask", {DType::boolean, {5}}},
      {"nothing", {DType::float32, {0, 3}}},
      {"f8", {DType::float8_e4m3fn, {7}}},
  };
  for (const auto& [name, spec] : specs) {
    model.emplace(name, filled(spec.first, spec.second, name));
    ASSERT_OK(store.put("model/" + name, model.at(name).view()).get(kWait));
  }
  float other = 1;
  ASSERT_OK(store.put("other", TensorView::of(&other, {})).get(kWait));  // not under the prefix

  TempDir one, sharded;
  auto saved = save_checkpoint(store, "model", one.path());
  ASSERT_OK(saved);
  EXPECT_EQ(saved->tensors, specs.size());
  EXPECT_EQ(saved->files, 1u);
  auto c = st::open_checkpoint(one.path());
  ASSERT_OK(c);
  EXPECT_EQ(c->files.front().path(), one.path() + "/model.safetensors");
  for (const auto& [name, t] : model) {
    auto v = c->files.front().view(name);  // names relative to the prefix
    ASSERT_OK(v) << name;
    EXPECT_TRUE(same_bytes(t, *v)) << name;
  }

  // Shards of at most 8 KiB, with an index; progress reaches the total.
  SaveCheckpointOptions o;
  o.max_shard_bytes = 8 << 10;
  o.metadata = {{"format", "pt"}};
  std::uint64_t last = 0, total = 0;
  o.progress = [&](std::uint64_t d, std::uint64_t t) {
    EXPECT_GE(d, last);
    last = d;
    total = t;
  };
  auto many = save_checkpoint(store, "model", sharded.path(), o);
  ASSERT_OK(many);
  EXPECT_GT(many->files, 1u);
  EXPECT_EQ(last, total);
  EXPECT_EQ(::access((sharded.path() + "/" + st::kIndexName).c_str(), F_OK), 0);

  // Load into a second store under another prefix, then save it back.
  auto second = Store::embedded().value();
  LoadOptions lo;
  lo.prefix = "restored";
  auto loaded = load_checkpoint(second, sharded.path(), lo);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->tensors, specs.size());
  EXPECT_EQ(loaded->files, many->files);
  for (const auto& [name, t] : model) {
    auto got = second.get("restored/" + name).get(kWait);
    ASSERT_OK(got) << name;
    EXPECT_TRUE(same_bytes(t, got->view())) << name;
  }
  TempDir again;
  ASSERT_OK(save_checkpoint(second, "restored", again.path()));
  auto back = st::open_checkpoint(again.path());
  ASSERT_OK(back);
  for (const auto& [name, t] : model) {
    auto v = back->files.front().view(name);
    ASSERT_OK(v) << name;
    EXPECT_TRUE(same_bytes(t, *v)) << name;
  }
}

TEST(Checkpoint, LoadsChosenTensorsAndReadsBoxesIntoCallerBuffers) {
  auto store = Store::embedded().value();
  TempDir dir;
  const Tensor w = filled(DType::float32, {8, 6}, "w");
  const Tensor b = filled(DType::float32, {6}, "b");
  ASSERT_OK(st::write_file(dir.path() + "/model.safetensors",
                           {{"layer.w", w.view()}, {"layer.b", b.view()}, {"head", b.view()}}));
  LoadOptions only;
  only.name_prefix = "layer.";
  auto r = load_checkpoint(store, dir.path(), only);
  ASSERT_OK(r);
  EXPECT_EQ(r->tensors, 2u);
  EXPECT_FALSE(*store.exists("head").get(kWait));
  EXPECT_TRUE(*store.exists("layer.w").get(kWait));
  LoadOptions missing;
  missing.names = {"nope"};
  EXPECT_ERROR(load_checkpoint(store, dir.path(), missing), Errc::not_found, "no tensor 'nope'");

  // A rank's box: rows 2..5, columns 1..4 of "layer.w", nothing else read.
  auto c = st::open_checkpoint(dir.path()).value();
  const auto box = TensorSlice::make({8, 6}, {2, 1}, {3, 3}).value();
  auto dst = Tensor::zeros(DType::float32, {3, 3}).value();
  ASSERT_OK(read_tensor_into(c, "layer.w", dst.view(), &box));
  for (int r0 = 0; r0 < 3; ++r0) {
    for (int c0 = 0; c0 < 3; ++c0) {
      EXPECT_EQ(dst.data_as<float>()[r0 * 3 + c0], w.data_as<float>()[(r0 + 2) * 6 + c0 + 1]);
    }
  }
  auto whole = Tensor::zeros(DType::float32, {6}).value();
  ASSERT_OK(read_tensor_into(c, "head", whole.view()));
  EXPECT_TRUE(same_bytes(b, whole.view()));
  EXPECT_ERROR(read_tensor_into(c, "head", dst.view()), Errc::shape_mismatch, "read 'head'");
  const auto outside = TensorSlice::make({9, 6}, {0, 0}, {3, 3}).value();
  EXPECT_ERROR(read_tensor_into(c, "layer.w", dst.view(), &outside), Errc::out_of_range,
               "is not in the tensor's shape [8, 6]");
  EXPECT_ERROR(read_tensor_into(c, "x", dst.view()), Errc::not_found, "has no tensor 'x'");
}

TEST(Checkpoint, StateDictsRoundTripWithTheirValues) {
  TempDir dir;
  const Tensor w = filled(DType::bfloat16, {16, 8}, "w");
  const Tensor b = filled(DType::float32, {8}, "b");
  StateDict sd;
  ASSERT_OK(sd.insert("layer.w", w.view()));
  ASSERT_OK(sd.insert("layer.b", b.view()));
  ASSERT_OK(sd.insert("step", Value::int64(1234)));
  ASSERT_OK(sd.insert("lr", Value::float64(3e-4)));
  ASSERT_OK(sd.insert("frozen", Value::boolean(true)));
  ASSERT_OK(sd.insert("config", Value::string("{\"layers\": 1}")));
  ASSERT_OK(sd.insert("blob", Value::bytes(std::string("\0\1\2", 3))));
  auto check = [&](const StateDict& got) {
    ASSERT_EQ(got.size(), sd.size());
    EXPECT_TRUE(same_bytes(w, got.find("layer.w")->view));
    EXPECT_TRUE(same_bytes(b, got.find("layer.b")->view));
    for (const char* v : {"step", "lr", "frozen", "config", "blob"}) {
      ASSERT_NE(got.find(v), nullptr) << v;
      ASSERT_FALSE(got.find(v)->is_tensor()) << v;
      EXPECT_EQ(*got.find(v)->value, *sd.find(v)->value) << v;
    }
  };
  // One file: other readers see the values as plain tensors.
  const std::string file = dir.path() + "/sd.safetensors";
  ASSERT_OK(save_state_dict(sd, file));
  auto loaded = load_state_dict(file);
  ASSERT_OK(loaded);
  check(*loaded);
  auto plain = st::File::open(file).value();
  EXPECT_EQ(plain.view("step")->dtype(), DType::int64);
  EXPECT_EQ(plain.view("step")->shape(), Shape{});
  EXPECT_EQ(plain.header().metadata.at("meshstore.value.step"), "int64");
  // Shards of at most 64 bytes: every value's mark lies in its own file.
  SaveCheckpointOptions o;
  o.max_shard_bytes = 64;
  auto report = save_state_dict(sd, dir.path() + "/shards", o);
  ASSERT_OK(report);
  EXPECT_GT(report->files, 2u);
  auto sharded = load_state_dict(dir.path() + "/shards");
  ASSERT_OK(sharded);
  check(*sharded);

  // Into the caller's state dict, a box of one tensor; errors first.
  auto c = st::open_checkpoint(file).value();
  auto rows = Tensor::zeros(DType::bfloat16, {4, 8}).value();
  StateDict into;
  ASSERT_OK(into.insert("layer.w", rows));
  ASSERT_OK(into.insert("step", Value::int64(0)));
  ASSERT_OK(read_state_dict_into(
      c, into, {{"layer.w", TensorSlice::make({16, 8}, {4, 0}, {4, 8}).value()}}));
  EXPECT_EQ(std::memcmp(into.find("layer.w")->view.data(),
                        static_cast<const std::byte*>(w.data()) + 4 * 8 * 2, 4 * 8 * 2),
            0);
  EXPECT_EQ(into.find("step")->value->as_int64(), 1234);
  StateDict wrong;
  auto f16 = Tensor::zeros(DType::float16, {8}).value();
  ASSERT_OK(wrong.insert("layer.b", f16));
  ASSERT_OK(wrong.insert("ghost", Value::int64(0)));
  ASSERT_OK(wrong.insert("lr", Tensor::zeros(DType::float64, {}).value()));
  EXPECT_ERROR(read_state_dict_into(c, wrong), Errc::dtype_mismatch,
               "'layer.b': stored F32, destination float16; 'ghost' is not in the checkpoint; "
               "'lr' is a tensor here, a value there");
  const auto* zero = static_cast<const std::uint16_t*>(wrong.find("layer.b")->view.data());
  EXPECT_EQ(zero[0], 0);  // untouched
}

TEST(Checkpoint, AStateDictInTheStoreIsSavedAsOne) {
  // put_state_dict packs small tensors and stores values: the save writes
  // its entries under their own names, and load_state_dict gives them back.
  auto store = Store::embedded().value();
  const Tensor big = filled(DType::float32, {256, 128}, "big");  // stored alone
  const Tensor small = filled(DType::float32, {4}, "small");     // packed
  StateDict sd;
  ASSERT_OK(sd.insert("big", big.view()));
  ASSERT_OK(sd.insert("small", small.view()));
  ASSERT_OK(sd.insert("step", Value::int64(9)));
  ASSERT_OK(store.state_dicts().put("opt", sd).get(kWait));
  TempDir dir;
  auto r = save_checkpoint(store, "opt", dir.path());
  ASSERT_OK(r);
  auto back = load_state_dict(dir.path());
  ASSERT_OK(back);
  ASSERT_EQ(back->size(), 3u);
  EXPECT_TRUE(same_bytes(big, back->find("big")->view));
  EXPECT_TRUE(same_bytes(small, back->find("small")->view));
  EXPECT_EQ(back->find("step")->value->as_int64(), 9);
}

TEST(Checkpoint, SaveRefusesWhatItCannotName) {
  auto store = Store::embedded().value();
  TempDir dir;
  EXPECT_ERROR(save_checkpoint(store, "none", dir.path()), Errc::not_found,
               "no tensor keys under it");
  float x = 1;
  ASSERT_OK(store.put("p", TensorView::of(&x, {})).get(kWait));
  EXPECT_ERROR(save_checkpoint(store, "p", dir.path()), Errc::invalid_argument,
               "is the prefix itself");
  // A malformed file is refused before anything is put.
  std::FILE* f = std::fopen((dir.path() + "/bad.safetensors").c_str(), "wb");
  std::fputs("12345678{}", f);
  std::fclose(f);
  EXPECT_ERROR(load_checkpoint(store, dir.path() + "/bad.safetensors"), Errc::invalid_argument,
               "bad.safetensors");
}

// Host memory labelled cuda:0, given to save and load: refused, naming the
// tensor, before any file is written or any byte read (tests/cuda covers
// real device memory, where a GPU is lent).
TEST(Checkpoint, DeviceViewsAreCheckedFirst) {
  TempDir dir;
  std::vector<float> x(16, 2.0f);
  const TensorView labelled(x.data(), DType::float32, {16}, {}, Device::cuda(0));
  const Errc code = cuda::status().ok() ? Errc::invalid_argument : Errc::unavailable;
  const std::string why = cuda::status().ok() ? "is not CUDA device memory" : "CUDA is not usable";
  StateDict sd;
  ASSERT_OK(sd.insert("w", labelled));
  const std::string file = dir.path() + "/w.safetensors";
  EXPECT_ERROR(save_state_dict(sd, file), code, "tensor 'w'");
  EXPECT_ERROR(save_state_dict(sd, file), code, why);
  struct stat info;
  EXPECT_NE(::stat(file.c_str(), &info), 0) << "a refused save left " << file;
  // A real file to read from.
  StateDict host;
  ASSERT_OK(host.insert("w", TensorView::of(x.data(), {16})));
  ASSERT_OK(save_state_dict(host, file));
  auto ck = safetensors::open_checkpoint(file);
  ASSERT_OK(ck);
  EXPECT_ERROR(read_tensor_into(*ck, "w", labelled), code, "read 'w'");
  EXPECT_ERROR(read_state_dict_into(*ck, sd), code, "'w'");
  EXPECT_EQ(x, std::vector<float>(16, 2.0f));
}

}  // namespace
}  // namespace meshstore
