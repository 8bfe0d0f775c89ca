#include "meshstore/status.hpp"

#include <set>

#include "testing/test_util.hpp"

namespace meshstore {
namespace {

TEST(Errc, ValuesAreStable) {
  // These numbers travel on the wire: renumbering one breaks peers.
  EXPECT_EQ(static_cast<int>(Errc::ok), 0);
  EXPECT_EQ(static_cast<int>(Errc::invalid_argument), 1);
  EXPECT_EQ(static_cast<int>(Errc::not_found), 2);
  EXPECT_EQ(static_cast<int>(Errc::out_of_capacity), 6);
  EXPECT_EQ(static_cast<int>(Errc::shutdown), 8);
  EXPECT_EQ(static_cast<int>(Errc::broken_promise), 9);
  EXPECT_EQ(static_cast<int>(Errc::internal), 18);
  EXPECT_EQ(static_cast<int>(Errc::wait_timeout), 19);
  EXPECT_EQ(static_cast<int>(Errc::unauthenticated), 20);
  EXPECT_EQ(static_cast<int>(Errc::cancelled), 21);
}

TEST(Errc, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (int i = 0; i <= static_cast<int>(kLastErrc); ++i) {
    auto n = errc_name(static_cast<Errc>(i));
    EXPECT_NE(n, "unknown_error") << i;
    EXPECT_TRUE(names.insert(n).second) << n;
  }
}

TEST(Status, DefaultIsOkAndRendersOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(s.message().empty());
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s(Errc::not_found, "no key 'w'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Errc::not_found);
  EXPECT_EQ(s.to_string(), "not_found: no key 'w'");
  EXPECT_EQ(s.with_context("get").to_string(), "not_found: get: no key 'w'");
  EXPECT_EQ(Status().with_context("get"), Status());
}

TEST(Result, HoldsValueOrError) {
  Result<int> good(42);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  Result<int> bad(Status(Errc::timeout, "slow"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Errc::timeout);
  EXPECT_EQ(bad.value_or(7), 7);
  EXPECT_THROW((void)bad.value(), BadResultAccess);
}

TEST(Result, OkStatusWithoutValueBecomesInternalError) {
  Result<int> r{Status()};
  EXPECT_EQ(r.status().code(), Errc::internal);
}

TEST(Result, ReturnIfErrorPropagates) {
  auto inner = [](bool fail) -> Result<int> {
    if (fail) return Status(Errc::out_of_range, "x");
    return 1;
  };
  auto outer = [&](bool fail) -> Status {
    MESHSTORE_RETURN_IF_ERROR(inner(fail));
    return Status();
  };
  EXPECT_OK(outer(false));
  EXPECT_ERROR(outer(true), Errc::out_of_range, "x");
}

}  // namespace
}  // namespace meshstore
