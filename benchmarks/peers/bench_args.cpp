// peer_bench's command line: parsing the options, comma-separated lists.
#include "bench_args.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_util.hpp"

namespace meshstore::bench {

namespace {

// "a,b,c" as {"a", "b", "c"}.
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const auto comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--workloads")
      a.workloads = split(next());
    else if (arg == "--contenders")
      a.contenders = split(next());
    else if (arg == "--iters")
      a.iters = std::max(1, std::atoi(next().c_str()));
    else if (arg == "--out")
      a.out = next();
    else if (arg == "--smoke")
      a.smoke = true;
    else if (arg == "--role")
      a.role = next();
    else if (arg == "--contender")
      a.contender = next();
    else if (arg == "--workload")
      a.workload = next();
    else if (arg == "--port")
      a.port = std::atoi(next().c_str());
    else if (arg == "--redis-socket")
      a.redis_socket = next();
    else
      die("unknown argument '" + arg + "' (see the comment at the top of peer_bench.cpp)");
  }
  return a;
}

}  // namespace meshstore::bench
