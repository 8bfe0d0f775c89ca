#pragma once
// Names the calling thread (what `top -H`, `perf` and gdb show), so the
// store's own threads are told apart from CAF's: "ms.copy" (the copy
// engine), "ms.small_ops" (a volume's small-op service), "ms.tcp.*" (the tcp
// transport). Linux keeps 15 characters; longer names are cut there.
#include <pthread.h>

#include <string>

namespace meshstore::internal {

/// Names `thread` (a std::thread's native_handle()): named by its creator,
/// it bears the name as soon as the creator goes on.
inline void name_thread(pthread_t thread, const std::string& name) {
  (void)pthread_setname_np(thread, name.substr(0, 15).c_str());
}

/// Names the calling thread.
inline void name_this_thread(const std::string& name) { name_thread(pthread_self(), name); }

}  // namespace meshstore::internal
