// meshrun: the example launcher. Starts N local processes of one program
// with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes every output line
// with its rank, stops the others when one fails (naming it), and cleans up
// every child on Ctrl-C or SIGTERM.
//
//   meshrun -n 4 [--master-addr 127.0.0.1] [--master-port P] [--grace 5] [--] prog args...

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

volatile std::sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(
      stderr,
      "meshrun: %s\n"
      "usage: meshrun -n N [--master-addr ADDR] [--master-port PORT] [--grace SECONDS] [--] "
      "program [args...]\n"
      "Starts N ranks of program on this host with RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torchrun does.\n",
      why.c_str());
  std::exit(2);
}

int parse_int(const std::string& flag, const char* text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    usage(flag + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "], got '" + text + "'");
  }
  return static_cast<int>(v);
}

// A free TCP port on 127.0.0.1 (the kernel picks it; released for the ranks).
// Whether a listener could bind 127.0.0.1:`port` now (as CAF binds, with
// SO_REUSEADDR, so a port in TIME_WAIT counts as free).
bool bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A MASTER_PORT for this launch. Ranks derive service ports from it (the
// store listens at MASTER_PORT + 1), so the next few ports must be free
// too, and all of them below the kernel's ephemeral range, where no
// outgoing connection can take one between now and the ranks' bind (an
// ephemeral MASTER_PORT once collided that way under parallel tests).
int free_port() {
  constexpr int kServices = 4;  // MASTER_PORT .. MASTER_PORT + 3
  int ephemeral_low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &ephemeral_low) != 1) ephemeral_low = 32768;
    std::fclose(f);
  }
  const int lo = 20000, hi = std::max(lo + 1000, ephemeral_low - kServices - 1);
  std::mt19937 rng(
      static_cast<unsigned>(getpid()) ^
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int port = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo));
    bool all = true;
    for (int k = 0; k < kServices && all; ++k) all = bindable(port + k);
    if (all) return port;
  }
  return 29500;
}

struct Stream {
  int fd = -1;
  std::string pending;  // an unfinished line
  FILE* sink = stdout;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
};

void emit(Rank& r, Stream& s, const char* data, std::size_t n) {
  s.pending.append(data, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::fprintf(s.sink, "[rank %d] %.*s\n", r.rank, static_cast<int>(nl - start),
                 s.pending.data() + start);
  }
  s.pending.erase(0, start);
  std::fflush(s.sink);
}

void drain(Rank& r, Stream& s) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      emit(r, s, buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // EOF or error: flush a last line without newline and close.
    if (!s.pending.empty()) {
      std::fprintf(s.sink, "[rank %d] %s\n", r.rank, s.pending.c_str());
      s.pending.clear();
    }
    close(s.fd);
    s.fd = -1;
    return;
  }
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + (name ? name : "?") +
           ")";
  }
  return "ended with status " + std::to_string(status);
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// What the command line asks for.
struct Options {
  int n = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int grace = 5;
  // Mutual TLS for the ranks (docs/security.md): handed down as
  // MESHSTORE_TLS_CERT, _KEY and _CA, which Store::from_env and
  // Mesh::from_env read; each rank checks them in full.
  std::vector<std::pair<const char*, std::string>> tls;
  bool encrypt_tcp = false;  // MESHSTORE_ENCRYPT_TCP=1 for every rank
  char** program = nullptr;  // the program and its arguments, null-terminated
};

void print_help() {
  std::printf(
      "usage: meshrun -n N [--master-addr ADDR] [--master-port PORT] [--grace SECONDS]\n"
      "               [--tls-cert FILE --tls-key FILE --tls-ca FILE] [--encrypt-tcp]\n"
      "               [--] program [args...]\n"
      "Starts N ranks of program on this host with RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torchrun does; with the\n"
      "--tls-* files, also MESHSTORE_TLS_CERT, _KEY and _CA (mutual TLS between ranks);\n"
      "with --encrypt-tcp, MESHSTORE_ENCRYPT_TCP=1 (the ranks' volumes seal tcp bytes).\n");
}

// The options, or exits: with the usage on a bad one, with 0 after --help.
Options parse_options(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "-n" || a == "--nproc")
      o.n = parse_int(a, value(), 1, 1024);
    else if (a == "--master-addr")
      o.master_addr = value();
    else if (a == "--master-port")
      o.master_port = parse_int(a, value(), 1, 65535);
    else if (a == "--grace")
      o.grace = parse_int(a, value(), 0, 3600);
    else if (a == "--encrypt-tcp")
      o.encrypt_tcp = true;
    else if (a == "--tls-cert" || a == "--tls-key" || a == "--tls-ca") {
      const char* file = value();
      if (access(file, R_OK) != 0) usage(a + ": cannot read '" + file + "': " + strerror(errno));
      o.tls.emplace_back(a == "--tls-cert"  ? "MESHSTORE_TLS_CERT"
                         : a == "--tls-key" ? "MESHSTORE_TLS_KEY"
                                            : "MESHSTORE_TLS_CA",
                         file);
    } else if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    } else if (a == "--") {
      ++i;
      break;
    } else if (!a.empty() && a[0] == '-')
      usage("unknown option '" + a + "'");
    else
      break;
  }
  if (o.n == 0) usage("-n N is required");
  if (!o.tls.empty()) {
    int given = 0;
    for (const char* name : {"MESHSTORE_TLS_CERT", "MESHSTORE_TLS_KEY", "MESHSTORE_TLS_CA"}) {
      given += std::any_of(o.tls.begin(), o.tls.end(),
                           [&](const auto& t) { return std::strcmp(t.first, name) == 0; });
    }
    if (given != 3) usage("--tls-cert, --tls-key and --tls-ca go together");
  }
  if (i >= argc) usage("no program given");
  if (o.master_port == 0) o.master_port = free_port();
  o.program = argv + i;
  return o;
}

void catch_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// In the child: rank `r`'s environment, then the program; never returns.
[[noreturn]] void exec_rank(const Options& o, int r, pid_t parent, int out, int err) {
  // Own process group, so meshrun can stop the rank and what it started;
  // and die with meshrun even if meshrun is killed with SIGKILL.
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  setenv("RANK", std::to_string(r).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(o.n).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.n).c_str(), 1);
  setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
  for (const auto& [name, file] : o.tls) setenv(name, file.c_str(), 1);
  if (o.encrypt_tcp) setenv("MESHSTORE_ENCRYPT_TCP", "1", 1);
  execvp(o.program[0], o.program);
  std::fprintf(stderr, "meshrun: cannot run '%s': %s\n", o.program[0], std::strerror(errno));
  _exit(127);
}

// Forks the ranks, their output piped back; false (perror'd) on failure.
bool start_ranks(const Options& o, std::vector<Rank>& ranks) {
  const pid_t self = getpid();
  ranks.resize(o.n);
  for (int r = 0; r < o.n; ++r) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      std::perror("meshrun: pipe");
      return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("meshrun: fork");
      return false;
    }
    if (pid == 0) exec_rank(o, r, self, out[1], err[1]);
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    ranks[r].rank = r;
    ranks[r].pid = pid;
    ranks[r].running = true;
    ranks[r].out = Stream{out[0], "", stdout};
    ranks[r].err = Stream{err[0], "", stderr};
  }
  return true;
}

// Relays the ranks' output until every rank ended; the first to fail (or
// a signal to meshrun) stops the others: SIGTERM, then SIGKILL after
// `grace` seconds. The rank that failed first, or -1.
int supervise(std::vector<Rank>& ranks, int grace) {
  int first_failure = -1;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  auto stop_all = [&](int sig) {
    for (auto& r : ranks) {
      if (r.running) kill(-r.pid, sig);
    }
  };
  auto begin_stop = [&] {
    if (stopping) return;
    stopping = true;
    stop_all(SIGTERM);
    stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace);
  };
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, Stream*>> owners;
    for (auto& r : ranks) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back(pollfd{s->fd, POLLIN, 0});
          owners.emplace_back(&r, s);
        }
      }
    }
    bool any_running = false;
    for (auto& r : ranks) any_running |= r.running;
    if (!any_running && fds.empty()) return first_failure;

    poll(fds.data(), fds.size(), 100);
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents != 0) drain(*owners[k].first, *owners[k].second);
    }
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) == r.pid) {
        r.running = false;
        r.status = status;
        if (failed(status) && !stopping) {
          first_failure = r.rank;
          std::fprintf(stderr, "meshrun: rank %d %s; stopping the other ranks\n", r.rank,
                       describe(status).c_str());
          begin_stop();
        }
        // The rank is gone; anything else left in its process group goes too.
        kill(-r.pid, SIGKILL);
      }
    }
    if (g_signal != 0 && !stopping) {
      std::fprintf(stderr, "meshrun: got signal %d; stopping every rank\n",
                   static_cast<int>(g_signal));
      begin_stop();
    }
    if (stopping && std::chrono::steady_clock::now() >= stop_deadline) {
      stop_all(SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  catch_signals();
  std::vector<Rank> ranks;
  if (!start_ranks(o, ranks)) return 1;
  const int first_failure = supervise(ranks, o.grace);
  if (first_failure >= 0) {
    const int status = ranks[first_failure].status;
    std::fprintf(stderr, "meshrun: failed: rank %d %s\n", first_failure, describe(status).c_str());
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }
  if (g_signal != 0) return 128 + g_signal;
  return 0;
}
