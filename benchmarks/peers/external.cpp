// peer_bench's contenders that start both their processes themselves:
// gloo (peer_gloo.py under python3), meshstore-python (peer_meshstore.py)
// and mpi (peer_mpi under mpirun), which report each round on stdout (see
// contenders.hpp).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "../bench_util.hpp"
#include "contenders.hpp"
#include "workload.hpp"

namespace meshstore::bench {

namespace {

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// The command running `contender` for `rounds` rounds of the workload in
// `spec`, or the reason it cannot run here.
meshstore::Result<std::vector<std::string>> external_command(const std::string& contender,
                                                             const std::string& spec, int rounds) {
  const std::string dir = own_dir();
  if (contender == "gloo" || contender == "meshstore-python") {
    if (!executable("/usr/bin/python3")) {
      return meshstore::Status(meshstore::Errc::unavailable,
                               "no /usr/bin/python3 (apt-get install python3-torch)");
    }
    const std::string script = contender == "gloo" ? "/peer_gloo.py" : "/peer_meshstore.py";
    return std::vector<std::string>{"/usr/bin/python3", dir + script,          "--spec", spec,
                                    "--rounds",         std::to_string(rounds)};
  }
#if MESHSTORE_HAVE_MPI
  if (contender == "mpi") {
    if (!executable(MESHSTORE_MPIEXEC)) {
      return meshstore::Status(
          meshstore::Errc::unavailable,
          std::string("no ") + MESHSTORE_MPIEXEC + " (apt-get install openmpi-bin)");
    }
    std::vector<std::string> cmd{MESHSTORE_MPIEXEC};
    std::string settings = kMpiSettings;
    for (std::size_t at = 0; at < settings.size();) {
      const auto sp = settings.find(' ', at);
      cmd.push_back(settings.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
      if (sp == std::string::npos) break;
      at = sp + 1;
    }
    if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");  // CI runs as root
    cmd.push_back("--oversubscribe");  // 2 ranks even where fewer cores are counted
    for (const auto& x : {dir + "/peer_mpi", std::string("--spec"), spec, std::string("--rounds"),
                          std::to_string(rounds)}) {
      cmd.push_back(x);
    }
    return cmd;
  }
#else
  if (contender == "mpi") {
    return meshstore::Status(meshstore::Errc::unavailable,
                             "built without MPI (apt-get install libopenmpi-dev openmpi-bin, "
                             "then build again)");
  }
#endif
  return meshstore::Status(meshstore::Errc::invalid_argument, "not an external contender");
}

// Runs an external contender; the median seconds of its rounds after `warm`,

}  // namespace

meshstore::Result<double> run_external(const Args& a, const std::string& contender,
                                       const Workload& w, int warm) {
  const std::string spec = a.out + "/spec-" + w.name + ".txt";
  {
    std::ofstream f(spec);
    for (const auto& [name, shape] : w.shapes)
      f << name << ' ' << meshstore::shape_numel(shape) << '\n';
    if (!f) die("writing " + spec);
  }
  auto cmd = external_command(contender, spec, a.iters + warm);
  if (!cmd.ok()) return cmd.status();
  const std::string program = cmd->front();
  cmd->erase(cmd->begin());
  auto child = spawn(program, std::move(cmd).value());
  std::fclose(child->to);  // no input
  child->to = nullptr;
  std::vector<double> times;
  char line[512];
  int rounds = 0;
  std::string skipped;
  while (std::fgets(line, sizeof(line), child->from)) {
    int r = 0, ok = 0;
    double secs = 0;
    if (std::strncmp(line, "skip ", 5) == 0) {
      skipped = std::string(line + 5);
      while (!skipped.empty() && skipped.back() == '\n') skipped.pop_back();
      continue;
    }
    if (std::sscanf(line, "round %d %lf %d", &r, &secs, &ok) != 3) continue;
    if (!ok)
      die(contender + " on " + w.name + ": B got the wrong bytes in round " + std::to_string(r));
    ++rounds;
    if (r >= warm) times.push_back(secs);
  }
  int status = 0;
  ::waitpid(child->pid, &status, 0);
  child->pid = -1;
  std::remove(spec.c_str());
  if (!skipped.empty()) return meshstore::Status(meshstore::Errc::unavailable, skipped);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || rounds != a.iters + warm) {
    die(contender + " on " + w.name + " failed after " + std::to_string(rounds) + " of " +
        std::to_string(a.iters + warm) + " rounds (its own messages are above)");
  }
  return median(times);
}

}  // namespace meshstore::bench
