// HOST:PORT as every address option takes it (internal::parse_address).

#include "meshstore/internal/address.hpp"

#include "testing/test_util.hpp"

namespace meshstore::internal {
namespace {

TEST(Address, HostAndPortOrBracketedV6) {
  auto v4 = parse_address("10.0.0.5:29517");
  ASSERT_OK(v4);
  EXPECT_EQ(v4->host, "10.0.0.5");
  EXPECT_EQ(v4->port, 29517);
  auto v6 = parse_address("[::1]:0");
  ASSERT_OK(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  auto bare_v6 = parse_address("::1:29600");  // what Store::address() prints for ::1
  ASSERT_OK(bare_v6);
  EXPECT_EQ(bare_v6->host, "::1");
  EXPECT_EQ(bare_v6->port, 29600);
  auto name = parse_address("trainer-3.cluster:80");
  ASSERT_OK(name);
  EXPECT_EQ(name->host, "trainer-3.cluster");
}

TEST(Address, WhatIsWrongIsNamed) {
  EXPECT_ERROR(parse_address("29517"), Errc::invalid_argument, "'29517' has no port");
  EXPECT_ERROR(parse_address(":29517"), Errc::invalid_argument, "has no host");
  EXPECT_ERROR(parse_address("h:http"), Errc::invalid_argument, "has no valid port");
  EXPECT_ERROR(parse_address("h:65536"), Errc::invalid_argument, "has no valid port");
  EXPECT_ERROR(parse_address("h:"), Errc::invalid_argument, "has no valid port");
  EXPECT_ERROR(parse_address("[::1:29600"), Errc::invalid_argument, "unclosed or empty '['");
  EXPECT_ERROR(parse_address("[]:1"), Errc::invalid_argument, "unclosed or empty '['");
}

TEST(Address, OnlyLoopbackHostsAreLoopback) {
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.9.9.9"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host(""));
  EXPECT_FALSE(is_loopback_host("10.0.0.5"));
}

}  // namespace
}  // namespace meshstore::internal
