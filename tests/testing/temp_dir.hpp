#pragma once

// A fresh directory under /tmp for a test's files, removed with everything
// in it when the test ends.

#include <stdlib.h>

#include <cstdlib>
#include <string>

namespace meshstore::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/meshstore-test-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    path_ = made ? made : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace meshstore::testing
