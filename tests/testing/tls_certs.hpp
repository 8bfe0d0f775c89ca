#pragma once

// Certificates for TLS tests, made by examples/tls/make_certs.sh (the
// test binary defines MESHSTORE_MAKE_CERTS as its path): a job's CA with a
// "server" and a "client" certificate, and another CA with a "rogue" one.
// Made once per suite: a fixture holds one in SetUpTestSuite.

#include <cstdlib>
#include <string>

#include "meshstore/tls.hpp"
#include "testing/temp_dir.hpp"

namespace meshstore::testing {

class TlsCerts {
 public:
  TlsCerts() {
    const std::string make = MESHSTORE_MAKE_CERTS;
    const std::string cmd = make + " " + dir_.file("job") + " server client > /dev/null && " +
                            make + " " + dir_.file("other") + " rogue > /dev/null && cat " +
                            dir_.file("other/ca.pem") + " " + dir_.file("job/ca.pem") + " > " +
                            dir_.file("both-cas.pem");
    made_ = std::system(cmd.c_str()) == 0;
  }

  /// Whether make_certs.sh made them all.
  bool made() const { return made_; }
  /// A file under the directory ("job/ca.pem", "other/rogue.key", ...).
  std::string file(const std::string& name) const { return dir_.file(name); }

  /// `name`'s certificate and key, trusting the job's CA.
  TlsOptions job(const std::string& name) const {
    return TlsOptions{file("job/" + name + ".pem"), file("job/" + name + ".key"),
                      file("job/ca.pem")};
  }
  /// A certificate the other CA signed; it trusts that CA and, when asked,
  /// the job's CA too (so it accepts the job's servers, and only their
  /// check of its certificate can refuse it).
  TlsOptions rogue(bool trusts_the_job_ca) const {
    return TlsOptions{file("other/rogue.pem"), file("other/rogue.key"),
                      trusts_the_job_ca ? file("both-cas.pem") : file("other/ca.pem")};
  }

 private:
  TempDir dir_;
  bool made_ = false;
};

}  // namespace meshstore::testing
