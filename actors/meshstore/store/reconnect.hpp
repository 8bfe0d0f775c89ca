#pragma once

// A connected store's way back to a restarted server: when the controller
// (or strategy) it joined goes down, a thread of the store reconnects to
// the same address, or to the next of the addresses it was given (a
// standby: StoreOptions::standby_of), in turn, for up to
// StoreOptions::limits.reconnect_timeout,
// registers this process's volumes with the new controller (which rebuilds
// its index from them: controller/rebuild.cpp) and strategy, and hands the
// new handles to the client actor. docs/reliability.md, "The controller's
// loss".

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshstore/status.hpp"

namespace meshstore::store {

class Reconnector {
 public:
  /// `attempt` tries one of `addresses` (in turn, from the first) once,
  /// for at most the time it is given: OK once this process rejoined.
  /// `gave_up` is told why once `timeout` passed without a rejoin.
  using Attempt = std::function<Status(const std::string& address, std::chrono::milliseconds)>;
  Reconnector(std::vector<std::string> addresses, std::chrono::milliseconds timeout,
              Attempt attempt, std::function<void(const std::string&)> gave_up);
  ~Reconnector();
  Reconnector(const Reconnector&) = delete;
  Reconnector& operator=(const Reconnector&) = delete;

  /// The controller or strategy went down (`why`): reconnecting begins.
  /// Called from the client actor's thread; returns at once.
  void control_down(const std::string& why);
  /// "" while the store is joined to its controller; else why not: the
  /// controller went down and reconnecting is under way, or it gave up.
  /// (/readyz's reason; any thread.)
  std::string down() const;
  /// Stops reconnecting and joins the thread (the store is closing).
  void stop();

 private:
  void run();
  // Reconnects until it succeeds, the timeout passes or stop(); logs how.
  void reconnect(const std::string& why);
  // Waits `d` or until stop(); false once stopping.
  bool pause(std::chrono::milliseconds d);

  const std::vector<std::string> addresses_;
  const std::string named_;  // the addresses, for the logs
  const std::chrono::milliseconds timeout_;
  const Attempt attempt_;
  const std::function<void(const std::string&)> gave_up_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string why_;   // non-empty: reconnect
  std::string down_;  // what down() says
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace meshstore::store
