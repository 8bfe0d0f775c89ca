#pragma once

// Reading a key back both ways a caller would: into a buffer of its own
// (get_into) and into a new tensor (get), each checked against the bytes
// put. The fast-path tests count what each read took around it.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {

/// get_into and get of `key` (a uint8 tensor of want.size() bytes) both
/// return `want`.
inline void expect_reads_back(Store& store, const std::string& key,
                              const std::vector<std::uint8_t>& want) {
  std::vector<std::uint8_t> back(want.size(), 0);
  const TensorView into(back.data(), DType::uint8, {static_cast<std::int64_t>(back.size())});
  ASSERT_OK(store.get_into(key, into).get(kWait));
  EXPECT_EQ(back, want);
  auto t = store.get(key).get(kWait);
  ASSERT_OK(t);
  ASSERT_EQ(t->nbytes(), want.size());
  EXPECT_EQ(std::memcmp(t->data(), want.data(), want.size()), 0);
}

}  // namespace meshstore::testing
