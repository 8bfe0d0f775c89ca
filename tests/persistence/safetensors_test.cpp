// The safetensors format: strict validation of malformed files, writing
// and reading every dtype, atomic writes, sharded checkpoints with their
// index, and interoperability with an independent Python reader and writer
// (tests/persistence/safetensors_ref.py).

#include "meshstore/safetensors.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/subprocess.hpp"
#include "testing/temp_dir.hpp"
#include "testing/test_util.hpp"

namespace meshstore {
namespace {

namespace st = safetensors;
using namespace std::chrono_literals;

using testing::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file image: the 8-byte length, the header text, `data_bytes` zeros.
std::string image(const std::string& header, std::size_t data_bytes = 0) {
  std::string out(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

// The reference tensors of safetensors_ref.py: byte j of tensor t holds
// (j * 7 + len(t)) % 251 (booleans: that & 1).
struct Ref {
  std::string name;
  DType dtype;
  Shape shape;
};
const std::vector<Ref>& reference() {
  static const std::vector<Ref> refs = {
      {"bool.mask", DType::boolean, {3, 5}},
      {"u8", DType::uint8, {17}},
      {"i8", DType::int8, {2, 3}},
      {"u16", DType::uint16, {4, 4}},
      {"i16", DType::int16, {7}},
      {"u32", DType::uint32, {3, 2}},
      {"i32", DType::int32, {5}},
      {"u64", DType::uint64, {2, 2}},
      {"i64", DType::int64, {3}},
      {"model.layers.0.f16", DType::float16, {8, 3}},
      {"model.layers.0.bf16", DType::bfloat16, {6, 5}},
      {"f32", DType::float32, {4, 2, 3}},
      {"f64", DType::float64, {5}},
      {"f8.e4m3", DType::float8_e4m3fn, {9}},
      {"f8.e5m2", DType::float8_e5m2, {3, 3}},
      {"scalar", DType::float32, {}},
      {"empty", DType::float32, {0, 4}},
      {"gewichte.größe", DType::bfloat16, {2, 2}},
      {"重み", DType::int32, {2}},
  };
  return refs;
}
const std::map<std::string, std::string> kRefMetadata = {{"format", "pt"}, {"note", "über"}};

Tensor reference_tensor(const Ref& r) {
  auto t = Tensor::empty(r.dtype, r.shape).value();
  auto* p = static_cast<std::uint8_t*>(t.data());
  for (std::uint64_t j = 0; j < t.nbytes(); ++j) {
    p[j] = static_cast<std::uint8_t>((j * 7 + r.name.size()) % 251);
    if (r.dtype == DType::boolean) p[j] &= 1;
  }
  return t;
}

// Every reference tensor, owned by `tensors`, named.
std::vector<st::NamedTensor> reference_tensors(std::vector<Tensor>& tensors) {
  tensors.clear();
  tensors.reserve(reference().size());
  std::vector<st::NamedTensor> named;
  for (const auto& r : reference()) {
    tensors.push_back(reference_tensor(r));
    named.push_back(st::NamedTensor{r.name, tensors.back().view()});
  }
  return named;
}

std::string python() { return MESHSTORE_PYTHON; }
std::string ref_script() { return MESHSTORE_SAFETENSORS_REF; }

// Runs the Python reference; skips the test when Python or numpy is missing.
bool run_reference(const std::vector<std::string>& args, std::string& output) {
  std::vector<std::string> argv{python(), ref_script()};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::Child child(argv);
  if (!child.wait(60s)) return false;
  output = child.output();
  return child.exit_code() == 0;
}

bool have_numpy() {
  testing::Child probe({python(), "-c", "import numpy"});
  return probe.wait(60s) && probe.exit_code() == 0;
}

// -- validation ------------------------------------------------------------------

// The malformed files of tests/persistence/malformed.json (shared with the
// Python module's tests), each refused with its fault named.
TEST(SafetensorsHeader, MalformedFilesAreNamedErrors) {
  const std::string f = "bad.safetensors";
  std::ifstream in(MESHSTORE_MALFORMED_CASES);
  ASSERT_TRUE(in) << MESHSTORE_MALFORMED_CASES;
  const auto cases = nlohmann::json::parse(in);
  auto unhex = [](const std::string& hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
      out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    return out;
  };
  std::size_t checked = 0;
  for (const auto& c : cases.at("headers")) {
    const std::string header =
        c.contains("header_hex") ? unhex(c.at("header_hex")) : c.at("header").get<std::string>();
    const std::string img = image(header, c.at("data_bytes").get<std::size_t>());
    EXPECT_ERROR(st::parse_file_image(img, f), Errc::invalid_argument,
                 "safetensors file 'bad.safetensors': " + c.at("error").get<std::string>())
        << c.at("name");
    ++checked;
  }
  for (const auto& c : cases.at("images")) {
    EXPECT_ERROR(st::parse_file_image(unhex(c.at("image_hex")), f), Errc::invalid_argument,
                 c.at("error").get<std::string>())
        << c.at("name");
    ++checked;
  }
  EXPECT_GE(checked, 20u);
  // Valid: an empty header, metadata only, trailing padding spaces.
  EXPECT_OK(st::parse_file_image(image("{}"), f));
  auto md = st::parse_file_image(image("{\"__metadata__\": {\"k\": \"v\"}}    "), f);
  ASSERT_OK(md);
  EXPECT_EQ(md->metadata.at("k"), "v");
}

TEST(SafetensorsHeader, DtypeNamesRoundTrip) {
  for (auto d : all_dtypes()) {
    auto back = st::dtype_from_name(dtype_safetensors_name(d));
    ASSERT_OK(back);
    EXPECT_EQ(*back, d);
  }
  EXPECT_ERROR(st::dtype_from_name("float32"), Errc::invalid_argument,
               "unknown safetensors dtype 'float32'");
}

TEST(SafetensorsFile, OpenNamesMissingAndTruncatedFiles) {
  TempDir dir;
  EXPECT_ERROR(st::File::open(dir.file("none.safetensors")), Errc::not_found, "none.safetensors");
  write_bytes(dir.file("short.safetensors"), "12");
  EXPECT_ERROR(st::File::open(dir.file("short.safetensors")), Errc::invalid_argument,
               "short.safetensors': it has 2 bytes");
  EXPECT_ERROR(st::File::open(dir.path()), Errc::io_error, "not a regular file");
}

// -- writing and reading -------------------------------------------------------------

TEST(SafetensorsFile, EveryDtypeRoundTripsBitExact) {
  TempDir dir;
  std::vector<Tensor> tensors;
  const std::vector<st::NamedTensor> named = reference_tensors(tensors);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> progress;
  const std::string path = dir.file("all.safetensors");
  ASSERT_OK(st::write_file(path, named, kRefMetadata,
                           [&](std::uint64_t d, std::uint64_t t) { progress.emplace_back(d, t); }));
  ASSERT_EQ(progress.size(), named.size());
  EXPECT_EQ(progress.back().first, progress.back().second);
  auto f = st::File::open(path);
  ASSERT_OK(f);
  EXPECT_EQ(f->header().metadata, kRefMetadata);
  EXPECT_EQ(f->header().data_start % 8, 0u);
  for (std::size_t i = 0; i < named.size(); ++i) {
    auto v = f->view(named[i].name);
    ASSERT_OK(v);
    EXPECT_EQ(v->dtype(), tensors[i].dtype()) << named[i].name;
    EXPECT_EQ(v->shape(), tensors[i].shape()) << named[i].name;
    EXPECT_TRUE(tensors[i].nbytes() == 0 ||
                std::memcmp(v->data(), tensors[i].data(), tensors[i].nbytes()) == 0)
        << named[i].name;
    // Aligned to its element size within the file.
    const auto* info = f->header().find(named[i].name);
    EXPECT_EQ((f->header().data_start + info->begin) % dtype_size(info->dtype), 0u);
  }
  EXPECT_ERROR(f->view("nope"), Errc::not_found, "has no tensor 'nope'");
}

TEST(SafetensorsFile, StridedSourcesAreWrittenInRowMajorOrder) {
  TempDir dir;
  std::vector<float> grid(12);
  for (int i = 0; i < 12; ++i) grid[static_cast<std::size_t>(i)] = static_cast<float>(i);
  const TensorView transposed(grid.data(), DType::float32, {4, 3}, {1, 4});
  ASSERT_OK(st::write_file(dir.file("t.safetensors"), {{"t", transposed}}));
  auto f = st::File::open(dir.file("t.safetensors")).value();
  const auto* p = static_cast<const float*>(f.view("t")->data());
  EXPECT_EQ(p[1], 4.0f);  // row 0 of the transpose: 0, 4, 8
  EXPECT_EQ(p[3], 1.0f);
}

TEST(SafetensorsFile, BadNamesAreRefusedAndNothingIsLeftBehind) {
  TempDir dir;
  float x = 1;
  const std::string path = dir.file("x.safetensors");
  EXPECT_ERROR(st::write_file(path, {{"a", TensorView::of(&x, {})}, {"a", TensorView::of(&x, {})}}),
               Errc::invalid_argument, "tensor name 'a' appears twice");
  EXPECT_ERROR(st::write_file(path, {{"__metadata__", TensorView::of(&x, {})}}),
               Errc::invalid_argument, "is reserved or empty");
  EXPECT_ERROR(st::write_file(path, {{"n", TensorView(nullptr, DType::float32, {3})}}),
               Errc::invalid_argument, "tensor 'n'");
  EXPECT_ERROR(st::write_file("/nonexistent-dir/x.safetensors", {{"a", TensorView::of(&x, {})}}),
               Errc::io_error, "/nonexistent-dir/x.safetensors");
  EXPECT_EQ(::access(path.c_str(), F_OK), -1);
  EXPECT_EQ(::access((path + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), -1);
}

TEST(SafetensorsFile, AWriterDroppedBeforeCommitLeavesNoFile) {
  // A crash mid-write: the final name never holds a torn file.
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    auto w = st::Writer::open(path, {{"a", DType::float32, {1024}}}).value();
    EXPECT_EQ(::access(tmp.c_str(), F_OK), 0);  // written under the temporary name
    EXPECT_EQ(::access(path.c_str(), F_OK), -1);
  }
  EXPECT_EQ(::access(tmp.c_str(), F_OK), -1);
  EXPECT_EQ(::access(path.c_str(), F_OK), -1);
  // Committed: the final name appears, the temporary is gone.
  auto w = st::Writer::open(path, {{"a", DType::float32, {2}}}).value();
  auto a = w.tensor("a").value();
  static_cast<float*>(a.data())[1] = 2.5f;
  ASSERT_OK(w.commit());
  EXPECT_EQ(::access(tmp.c_str(), F_OK), -1);
  EXPECT_EQ(static_cast<const float*>(st::File::open(path)->view("a")->data())[1], 2.5f);
  EXPECT_ERROR(w.commit(), Errc::invalid_argument, "committed already");
}

TEST(SafetensorsFile, SerializeMakesTheBytesWriteFileWrites) {
  TempDir dir;
  std::vector<Tensor> tensors;
  const auto named = reference_tensors(tensors);
  ASSERT_OK(st::write_file(dir.file("a.safetensors"), named, kRefMetadata));
  std::ifstream in(dir.file("a.safetensors"), std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bytes = st::serialize(named, kRefMetadata);
  ASSERT_OK(bytes);
  EXPECT_EQ(*bytes, written);
  auto h = st::parse_file_image(*bytes, "image");
  ASSERT_OK(h);
  EXPECT_TRUE(h->has_metadata);
  EXPECT_FALSE(st::parse_file_image(st::serialize(named).value(), "image")->has_metadata);
  EXPECT_TRUE(st::parse_file_image(image("{\"__metadata__\": {}}"), "e")->has_metadata);
  float x = 1;
  EXPECT_ERROR(st::serialize({{"", TensorView::of(&x, {})}}, {}, "save"), Errc::invalid_argument,
               "save: tensor name '' is reserved or empty");
}

TEST(SafetensorsFile, ACopyOnWriteMappingKeepsItsWritesPrivate) {
  TempDir dir;
  const std::string path = dir.file("c.safetensors");
  std::vector<std::int32_t> v{1, 2, 3, 4};
  ASSERT_OK(st::write_file(path, {{"v", TensorView::of(v.data(), {4})}}));
  auto cow = st::File::open(path, st::File::Access::copy_on_write);
  ASSERT_OK(cow);
  EXPECT_EQ(cow->access(), st::File::Access::copy_on_write);
  auto* p = static_cast<std::int32_t*>(cow->view("v")->data());
  p[2] = 99;          // a private page now
  cow->release("v");  // a no-op: the page holds a write
  EXPECT_EQ(p[2], 99);
  auto shared = st::File::open(path);  // read-only, shared
  ASSERT_OK(shared);
  EXPECT_EQ(static_cast<const std::int32_t*>(shared->view("v")->data())[2], 3);
  auto again = st::File::open(path, st::File::Access::copy_on_write);  // its own pages
  EXPECT_EQ(static_cast<const std::int32_t*>(again->view("v")->data())[2], 3);
}

// -- checkpoints ------------------------------------------------------------------------

TEST(SafetensorsCheckpoint, ShardsPlanSizesAndNames) {
  auto [file, n] = st::plan_shards({10, 10, 10, 25, 1}, 20);
  EXPECT_EQ(file, (std::vector<std::size_t>{0, 0, 1, 2, 3}));
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(st::plan_shards({10, 10}, 0).second, 1u);
  EXPECT_EQ(st::shard_file_name(1, 3), "model-00002-of-00003.safetensors");
  EXPECT_EQ(*st::parse_size("5GB"), 5000000000ull);
  EXPECT_EQ(*st::parse_size("1.5GiB"), 1610612736ull);
  EXPECT_EQ(*st::parse_size("500mb"), 500000000ull);
  EXPECT_EQ(*st::parse_size("4096"), 4096ull);
  EXPECT_ERROR(st::parse_size("5 parsecs"), Errc::invalid_argument, "size '5 parsecs'");
  EXPECT_ERROR(st::parse_size(""), Errc::invalid_argument, "expected a number");
}

TEST(SafetensorsCheckpoint, IndexedDirectoriesAreValidated) {
  TempDir dir;
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  ASSERT_OK(st::write_file(dir.file("model-00001-of-00002.safetensors"),
                           {{"a", TensorView::of(a, {2})}}));
  ASSERT_OK(st::write_file(dir.file("model-00002-of-00002.safetensors"),
                           {{"b", TensorView::of(b, {3})}}));
  // No index and two files: ambiguous.
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument,
               "no model.safetensors.index.json, and 2 .safetensors files");
  ASSERT_OK(st::write_index(
      dir.path(), 20,
      {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}));
  auto c = st::open_checkpoint(dir.path());
  ASSERT_OK(c);
  EXPECT_EQ(c->files.size(), 2u);
  EXPECT_EQ(c->total_bytes, 20u);
  EXPECT_EQ(c->weight_map.at("b"), 1u);
  const std::string index = dir.file(st::kIndexName);
  write_bytes(index,
              "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
              "\"b\": \"missing.safetensors\"}}");
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument,
               "names file 'missing.safetensors', which does not exist");
  write_bytes(index,
              "{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\", "
              "\"b\": \"model-00002-of-00002.safetensors\"}}");
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument,
               "tensor 'a' is not in 'model-00002-of-00002.safetensors'");
  // A file the index names holds a tensor the index does not list.
  ASSERT_OK(st::write_file(dir.file("extra.safetensors"),
                           {{"c", TensorView::of(a, {2})}, {"d", TensorView::of(b, {3})}}));
  write_bytes(index, "{\"weight_map\": {\"c\": \"extra.safetensors\"}}");
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument,
               "tensor 'd' of '" + dir.file("extra.safetensors") + "' is missing from it");
  write_bytes(index, "{\"weight_map\": {\"a\": \"../a.safetensors\"}}");
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument,
               "not a file name in the checkpoint's directory");
  write_bytes(index, "{\"weight_map\": [");
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument, "not valid JSON");
  write_bytes(index, "{}");
  EXPECT_ERROR(st::open_checkpoint(dir.path()), Errc::invalid_argument, "no \"weight_map\" object");
  EXPECT_ERROR(st::open_checkpoint(dir.file("nothing")), Errc::not_found, "nothing");
}

// -- interoperability with an independent implementation -----------------------------

TEST(SafetensorsInterop, FilesWrittenHereReadInTheReferenceReader) {
  if (!have_numpy()) GTEST_SKIP() << python() << " with numpy is not available";
  TempDir dir;
  std::vector<Tensor> tensors;
  const std::vector<st::NamedTensor> named = reference_tensors(tensors);
  const std::string path = dir.file("cpp.safetensors");
  ASSERT_OK(st::write_file(path, named, kRefMetadata));
  std::string out;
  EXPECT_TRUE(run_reference({"check", path}, out)) << out;
}

TEST(SafetensorsInterop, FilesTheReferenceWriterWritesLoadHere) {
  if (!have_numpy()) GTEST_SKIP() << python() << " with numpy is not available";
  TempDir dir;
  const std::string path = dir.file("py.safetensors");
  std::string out;
  ASSERT_TRUE(run_reference({"write", path}, out)) << out;
  auto f = st::File::open(path);
  ASSERT_OK(f);
  EXPECT_EQ(f->header().metadata, kRefMetadata);
  EXPECT_EQ(f->header().tensors.size(), reference().size());
  for (const auto& r : reference()) {
    auto v = f->view(r.name);
    ASSERT_OK(v) << r.name;
    EXPECT_EQ(v->dtype(), r.dtype) << r.name;
    EXPECT_EQ(v->shape(), r.shape) << r.name;
    const Tensor want = reference_tensor(r);
    EXPECT_TRUE(want.nbytes() == 0 || std::memcmp(v->data(), want.data(), want.nbytes()) == 0)
        << r.name;
  }
}

}  // namespace
}  // namespace meshstore
