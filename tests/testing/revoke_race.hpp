#pragma once

// Reads racing a revoked loan (PublishOptions::revoke_on_timeout): the
// scaffolding shared by the host (cma) and device (cuda-ipc) tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "meshstore/store.hpp"
#include "testing/test_util.hpp"

namespace meshstore::testing {

/// How the racing reads ended.
struct RevokeRace {
  int whole = 0;  // finished before the revoke: the published value
  int gone = 0;   // lost their lease: found the version gone
};

/// `rounds` times: `fill(round)` writes the value `round` into the
/// publisher's buffer behind `sd`'s one entry `entry`; the state dict is
/// published under `prefix` as a revocable direct loan (1 ms bound); a read
/// of the entry into `dst` starts; reclaim() revokes; at once `fill(-round)`
/// overwrites the buffer, as a trainer stepping would. Each read must hold
/// `round` everywhere or fail with not_found; never a mix. Fatal failures
/// return early (check HasFatalFailure()). `what` names the readers in the
/// printed summary.
inline RevokeRace race_revoke(Store& store, const std::string& prefix, const StateDict& sd,
                              const std::string& entry, const std::function<void(float)>& fill,
                              std::vector<float>& dst, int rounds, const char* what) {
  RevokeRace n;
  const auto count = static_cast<std::int64_t>(dst.size());
  for (int round = 1; round <= rounds; ++round) {
    const auto value = static_cast<float>(round);
    fill(value);
    PublishOptions po;
    po.mode = PublishMode::direct;
    po.reclaim_timeout = std::chrono::milliseconds(1);
    po.revoke_on_timeout = true;
    auto pub = store.state_dicts().publish(prefix, sd, po).get(kWait);
    EXPECT_TRUE(is_ok(pub));
    if (!pub.ok()) return n;
    const std::string key = prefix + "/v" + std::to_string(pub->version()) + "/" + entry;
    auto read = store.get_into(key, TensorView::of(dst.data(), {count}));
    auto reclaimed = pub->reclaim().get(kWait);
    EXPECT_TRUE(is_ok(reclaimed)) << "round " << round;
    fill(-value);
    auto r = read.get(kWait);
    if (r.ok()) {
      ++n.whole;
      EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [&](float x) { return x == value; }))
          << "round " << round << ": a read that succeeded holds bytes written after the revoke";
    } else {
      ++n.gone;
      EXPECT_EQ(r.status().code(), Errc::not_found) << r.status().to_string();
    }
    if (::testing::Test::HasFailure()) return n;
  }
  std::printf("%s reads racing a revoke: %d whole, %d found the version gone\n", what, n.whole,
              n.gone);
  return n;
}

}  // namespace meshstore::testing
