#include "meshstore/state_dict.hpp"

#include "testing/test_util.hpp"

namespace meshstore {
namespace {

TEST(Value, EveryKindRoundTripsThroughItsEncoding) {
  for (const Value& v : {Value::bytes(std::string("\0\1\2", 3)), Value::string("héllo"),
                         Value::int64(-42), Value::float64(-0.0), Value::float64(3.25),
                         Value::boolean(true), Value::boolean(false), Value::string("")}) {
    auto back = Value::decode(v.encode());
    ASSERT_OK(back);
    EXPECT_EQ(*back, v);
  }
  EXPECT_NE(Value::float64(0.0), Value::float64(-0.0));  // compared by bits
  EXPECT_NE(Value::string("1"), Value::bytes("1"));
  EXPECT_ERROR(Value::decode(""), Errc::protocol_error, "empty");
  EXPECT_ERROR(Value::decode(std::string(1, '\2') + "abc"), Errc::protocol_error, "8 bytes");
  EXPECT_ERROR(Value::decode(std::string(1, '\x09')), Errc::protocol_error, "unknown kind");
}

TEST(StateDict, KeepsInsertionOrderAndRejectsBadEntries) {
  float a = 1, b[4] = {1, 2, 3, 4};
  StateDict sd;
  ASSERT_OK(sd.insert("z.weight", TensorView::of(b, {4})));
  ASSERT_OK(sd.insert("a.step", Value::int64(7)));
  ASSERT_OK(sd.insert("m.bias", TensorView::of(&a, {})));
  ASSERT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd.entries()[0].name, "z.weight");
  EXPECT_EQ(sd.entries()[1].name, "a.step");
  EXPECT_FALSE(sd.entries()[1].is_tensor());
  EXPECT_EQ(sd.tensor_bytes(), 20u);
  ASSERT_NE(sd.find("m.bias"), nullptr);
  EXPECT_EQ(sd.find("nope"), nullptr);
  EXPECT_ERROR(sd.insert("z.weight", Value::int64(1)), Errc::invalid_argument, "appears twice");
  EXPECT_ERROR(sd.insert("", Value::int64(1)), Errc::invalid_argument, "empty name");
  EXPECT_ERROR(sd.insert("null", TensorView(nullptr, DType::float32, {3})), Errc::invalid_argument,
               "'null'");
  EXPECT_ERROR(sd.insert("undef", Tensor()), Errc::invalid_argument, "undefined");
}

TEST(StateDictNames, EscapingRoundTripsAnyComponent) {
  const std::vector<std::vector<std::string>> cases = {
      {"model", "layers", "0", "weight"},
      {"a.b", "c\\d", "[not an index]", "e."},
      {".", "\\", "[", "]"},
      {"héllo wörld", "tab\there"},
  };
  for (const auto& parts : cases) {
    const std::vector<bool> plain(parts.size(), false);
    const std::string name = join_name(parts, plain);
    std::vector<std::string> back;
    std::vector<bool> idx;
    ASSERT_OK(split_name(name, back, idx)) << name;
    EXPECT_EQ(back, parts) << name;
    EXPECT_EQ(idx, plain) << name;
  }
  // A plain PyTorch name needs no escaping.
  EXPECT_EQ(join_name({"model", "layers", "0", "q_proj", "weight"}, {}),
            "model.layers.0.q_proj.weight");
  EXPECT_EQ(join_name({"opt", "groups", "1", "lr"}, {false, false, true, false}),
            "opt.groups.[1].lr");
}

TEST(StateDictNames, MalformedNamesAreNamed) {
  std::vector<std::string> parts;
  std::vector<bool> idx;
  EXPECT_ERROR(split_name("a..b", parts, idx), Errc::invalid_argument, "empty component");
  EXPECT_ERROR(split_name("a.b\\", parts, idx), Errc::invalid_argument, "lone");
  EXPECT_ERROR(split_name("a.[x]", parts, idx), Errc::invalid_argument, "malformed list index");
  EXPECT_ERROR(split_name("a.[01]", parts, idx), Errc::invalid_argument, "leading zero");
  EXPECT_ERROR(split_name("a.[99999999999999999999]", parts, idx), Errc::invalid_argument,
               "too large");
}

TEST(StateDictNested, NestedMapsAndListsRoundTrip) {
  float w[6] = {1, 2, 3, 4, 5, 6};
  Nested root = Nested::map();
  Nested layer = Nested::map();
  layer.set("weight", Nested::tensor(TensorView::of(w, {2, 3})));
  Nested layers = Nested::map();
  layers.set("0", layer);
  Nested model = Nested::map();
  model.set("layers", layers);
  root.set("model", model);
  Nested groups = Nested::list();
  groups.push(Nested::map().set("lr", Nested::value(Value::float64(0.1))));
  groups.push(Nested::map().set("lr", Nested::value(Value::float64(0.01))));
  root.set("param_groups", groups);
  root.set("a.b", Nested::value(Value::string("dotted key")));

  auto sd = flatten(root);
  ASSERT_OK(sd);
  std::vector<std::string> names;
  for (const auto& e : sd->entries()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a\\.b", "model.layers.0.weight",
                                             "param_groups.[0].lr", "param_groups.[1].lr"}));
  auto back = unflatten(*sd);
  ASSERT_OK(back);
  auto again = flatten(*back);
  ASSERT_OK(again);
  ASSERT_EQ(again->size(), sd->size());
  for (std::size_t i = 0; i < sd->size(); ++i) {
    EXPECT_EQ(again->entries()[i].name, sd->entries()[i].name);
  }
  const auto& g = back->children().at("param_groups");
  ASSERT_EQ(g.kind(), Nested::Kind::list);
  ASSERT_EQ(g.items().size(), 2u);
  EXPECT_EQ(*g.items()[1].children().at("lr").val(), Value::float64(0.01));
  const auto& t = back->children().at("model").children().at("layers").children().at("0");
  EXPECT_EQ(t.children().at("weight").view().data(), static_cast<void*>(w));
}

TEST(StateDictNested, ConflictingNamesAreErrors) {
  float x = 1;
  StateDict leaf_and_map;
  ASSERT_OK(leaf_and_map.insert("a", TensorView::of(&x, {})));
  ASSERT_OK(leaf_and_map.insert("a.b", TensorView::of(&x, {})));
  EXPECT_ERROR(unflatten(leaf_and_map), Errc::invalid_argument, "leaf");
  StateDict mixed;
  ASSERT_OK(mixed.insert("a.[0]", TensorView::of(&x, {})));
  ASSERT_OK(mixed.insert("a.k", TensorView::of(&x, {})));
  EXPECT_ERROR(unflatten(mixed), Errc::invalid_argument, "mixes");
  StateDict gap;
  ASSERT_OK(gap.insert("a.[1]", TensorView::of(&x, {})));
  EXPECT_ERROR(unflatten(gap), Errc::invalid_argument, "lacks index 0");
  EXPECT_ERROR(flatten(Nested::list()), Errc::invalid_argument, "root");
  EXPECT_TRUE(flatten(Nested::map())->empty());  // an empty state dict
}

}  // namespace
}  // namespace meshstore
