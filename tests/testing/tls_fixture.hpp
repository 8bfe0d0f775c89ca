#pragma once

// A test fixture whose suite shares one set of certificates
// (testing/tls_certs.hpp), made before its first test and removed after
// its last.

#include <gtest/gtest.h>

#include <string>

#include "testing/tls_certs.hpp"

namespace meshstore::testing {

class TlsCertsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TlsCerts();
    ASSERT_TRUE(certs_->made()) << MESHSTORE_MAKE_CERTS << " failed";
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  static TlsOptions job(const std::string& name) { return certs_->job(name); }

  inline static TlsCerts* certs_ = nullptr;
};

}  // namespace meshstore::testing
