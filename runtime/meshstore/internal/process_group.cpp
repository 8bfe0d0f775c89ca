#include "meshstore/internal/process_group.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "meshstore/logging.hpp"

extern char** environ;

namespace meshstore::internal {
namespace {

// Where a child finds its lifeline: high enough to stay clear of the
// descriptors a program expects.
constexpr int kChildLifelineFd = 247;
// A line longer than this is passed on in pieces.
constexpr std::size_t kMaxLine = 64 * 1024;

// `program` as a path exec can take: as given when it has a slash, else the
// first executable match on PATH.
Result<std::string> resolve(const std::string& program) {
  if (program.empty()) return Status(Errc::invalid_argument, "launch: the program is empty");
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) != 0) {
      return Status(Errc::not_found,
                    "launch: cannot run '" + program + "': " + std::strerror(errno));
    }
    return program;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string dir = dirs.substr(begin, end - begin);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return Status(Errc::not_found, "launch: '" + program + "' is not on PATH");
}

// This process's environment with `extra` set on top, as "K=V" strings.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env[std::string(*e, static_cast<std::size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace

struct ProcessGroup::Impl {
  struct Stream {
    int fd = -1;
    std::string partial;
  };
  struct Child {
    pid_t pid = -1;
    bool running = false;
    Stream out, err;
  };
  OnLine on_line;
  OnExit on_exit;
  mutable std::mutex mu;  // guards children's pid/running, stopping, deadline
  std::vector<Child> children;
  std::vector<bool> again;  // by child: relaunch() asked, not yet started
  // What each child is started with, kept to start it again: resolved
  // paths, argv and "K=V" environments, made before any fork.
  std::vector<std::string> programs;
  std::vector<std::vector<std::string>> argvs, envs;
  int wake[2] = {-1, -1};
  int lifeline = -1;       // the write end: closed when the group stops
  int lifeline_read = -1;  // what each child gets as its lifeline
  pid_t parent = -1;
  bool stopping = false;
  // stop(): the lifeline closes and SIGTERM goes out at term_at, SIGKILL at
  // kill_at, to the children still running.
  std::chrono::steady_clock::time_point term_at = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  std::thread pump;

  void emit(int index, bool is_stderr, Stream& s, bool eof) {
    std::size_t start = 0;
    for (;;) {
      const std::size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      if (on_line) on_line(index, is_stderr, s.partial.substr(start, nl - start));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if ((eof && !s.partial.empty()) || s.partial.size() > kMaxLine) {
      if (on_line) on_line(index, is_stderr, s.partial);
      s.partial.clear();
    }
  }

  void drain(int index, bool is_stderr, Stream& s) {
    char buf[16384];
    for (;;) {
      const ssize_t n = ::read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        s.partial.append(buf, static_cast<std::size_t>(n));
        emit(index, is_stderr, s, false);
        continue;
      }
      if (n < 0 && (errno == EINTR)) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      emit(index, is_stderr, s, true);  // end of file (or an error): done
      ::close(s.fd);
      s.fd = -1;
      return;
    }
  }

  // The poll set and, per entry, its child and stream: refilled on every
  // wake-up within the capacity start() reserved.
  std::vector<pollfd> fds;
  std::vector<std::pair<int, bool>> owners;

  void run() {
    auto drained_at = std::chrono::steady_clock::time_point::max();
    for (;;) {
      poll_output();
      const bool any_running = reap() | start_asked();
      const bool stop_now = escalate(any_running);
      if (stop_now && !any_running && output_done(drained_at)) return;
    }
  }

  // Waits up to 100 ms for output or a wake-up, and passes on what came.
  void poll_output() {
    fds.assign(1, pollfd{wake[0], POLLIN, 0});
    owners.assign(1, {-1, false});
    for (std::size_t i = 0; i < children.size(); ++i) {
      for (bool e : {false, true}) {
        const int fd = e ? children[i].err.fd : children[i].out.fd;
        if (fd >= 0) {
          fds.push_back(pollfd{fd, POLLIN, 0});
          owners.emplace_back(static_cast<int>(i), e);
        }
      }
    }
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents != 0) {
      char b[64];
      while (::read(wake[0], b, sizeof(b)) > 0) {
      }
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto& c = children[static_cast<std::size_t>(owners[k].first)];
      drain(owners[k].first, owners[k].second, owners[k].second ? c.err : c.out);
    }
  }

  // Reaps the children that exited (their groups killed, on_exit told);
  // true while any still runs.
  bool reap() {
    bool any_running = false;
    for (std::size_t i = 0; i < children.size(); ++i) {
      pid_t pid;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!children[i].running) continue;
        pid = children[i].pid;
      }
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        {
          std::lock_guard<std::mutex> lock(mu);
          children[i].running = false;
        }
        ::kill(-pid, SIGKILL);  // whatever it left in its group goes too
        if (on_exit) on_exit(static_cast<int>(i), status);
      } else {
        any_running = true;
      }
    }
    return any_running;
  }

  // While stopping: the lifeline closes, then SIGTERM at term_at and
  // SIGKILL at kill_at to those still running. True once stopping.
  bool escalate(bool any_running) {
    std::lock_guard<std::mutex> lock(mu);
    const auto now = std::chrono::steady_clock::now();
    if (stopping && (now >= term_at || !any_running)) {
      if (lifeline >= 0) ::close(lifeline);  // children see end-of-file
      lifeline = -1;
      if (now >= term_at) {
        for (auto& c : children) {
          if (c.running) ::kill(-c.pid, SIGTERM);
        }
        term_at = std::chrono::steady_clock::time_point::max();
      }
    }
    if (stopping && any_running && now >= kill_at) {
      for (auto& c : children) {
        if (c.running) ::kill(-c.pid, SIGKILL);
      }
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    return stopping;
  }

  // Every child is reaped: true once its output is drained, or given up on
  // a second after `drained_at` (a grandchild outside its group may hold
  // the pipe).
  bool output_done(std::chrono::steady_clock::time_point& drained_at) {
    bool open = false;
    for (auto& c : children) open |= c.out.fd >= 0 || c.err.fd >= 0;
    if (!open) return true;
    const auto now = std::chrono::steady_clock::now();
    if (drained_at == std::chrono::steady_clock::time_point::max()) drained_at = now;
    if (now - drained_at <= std::chrono::seconds(1)) return false;
    for (std::size_t i = 0; i < children.size(); ++i) {
      close_stream(static_cast<int>(i), false, children[i].out);
      close_stream(static_cast<int>(i), true, children[i].err);
    }
    return true;
  }

  // Passes on what is left of a stream's partial line and closes it.
  void close_stream(int index, bool is_stderr, Stream& s) {
    if (s.fd < 0) return;
    emit(index, is_stderr, s, true);
    ::close(s.fd);
    s.fd = -1;
  }

  // Forks child `i` with its program, its pipes and the lifeline. Errc::
  // unavailable when a pipe or the fork fails (nothing left open).
  Status start_child(std::size_t i);

  // On the pump thread: the children relaunch() asked for that have
  // exited, started again unless the group is stopping. True when one
  // runs now.
  bool start_asked() {
    std::vector<std::size_t> now;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (std::size_t i = 0; i < children.size(); ++i) {
        if (!again[i]) continue;
        again[i] = false;
        if (children[i].running) continue;  // relaunch() refused it: never here
        if (!stopping) now.push_back(i);
      }
    }
    bool started = false;
    for (auto i : now) started |= start_again(i);
    return started;
  }

  // Child `i`, reaped, started again; its old pipes' last output passed
  // on first. True once it runs.
  bool start_again(std::size_t i) {
    auto& c = children[i];
    for (auto* st : {&c.out, &c.err}) {
      if (st->fd < 0) continue;
      drain(static_cast<int>(i), st == &c.err, *st);  // closes it at end of file
      close_stream(static_cast<int>(i), st == &c.err, *st);
    }
    if (auto s = start_child(i); !s.ok()) {
      log::get("proc")->error("process {} could not be started again: {}", i, s.to_string());
      return false;
    }
    return true;
  }

  void poke() {
    if (wake[1] >= 0) {
      const char b = 1;
      [[maybe_unused]] auto n = ::write(wake[1], &b, 1);
    }
  }

  // A pid and its pipes, after a failed start: stopped and closed.
  void abandon() {
    for (auto& c : children) {
      if (c.running) {
        ::kill(-c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      if (c.out.fd >= 0) ::close(c.out.fd);
      if (c.err.fd >= 0) ::close(c.err.fd);
    }
    children.clear();
  }

  ~Impl() {
    for (int fd : {wake[0], wake[1], lifeline, lifeline_read}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

namespace {

// In a child just forked: its own process group, its pipes as stdout and
// stderr, the lifeline at kChildLifelineFd, then the program. Only
// async-signal-safe calls until exec (strerror is not one).
[[noreturn]] void exec_child(const std::string& program, char* const* argv, char* const* envp,
                             int out, int err, int life, pid_t parent) {
  ::setpgid(0, 0);
  if (::getppid() != parent) ::_exit(1);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  if (life == kChildLifelineFd) {
    ::fcntl(life, F_SETFD, 0);
  } else {
    ::dup2(life, kChildLifelineFd);  // without close-on-exec
  }
  ::execve(program.c_str(), argv, envp);
  // The errno as digits, for the parent's log of this child's stderr.
  char msg[] = "cannot exec the program: errno    \n";
  int e = errno;
  for (int d = 33; d >= 31 && e > 0; --d, e /= 10) msg[d] = static_cast<char>('0' + e % 10);
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  ::_exit(127);
}

}  // namespace

Status ProcessGroup::Impl::start_child(std::size_t i) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return Status(Errc::unavailable, std::string("launch: pipe: ") + std::strerror(errno));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    return Status(Errc::unavailable, std::string("launch: pipe: ") + std::strerror(e));
  }
  std::vector<char*> argv, envp;
  for (auto& a : argvs[i]) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs[i]) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0)
    exec_child(programs[i], argv.data(), envp.data(), out[1], err[1], lifeline_read, parent);
  const int fork_errno = errno;
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return Status(Errc::unavailable, std::string("launch: fork: ") + std::strerror(fork_errno));
  }
  ::setpgid(pid, pid);
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  auto& c = children[i];
  c.out.fd = out[0];
  c.err.fd = err[0];
  c.out.partial.clear();
  c.err.partial.clear();
  std::lock_guard<std::mutex> lock(mu);
  c.pid = pid;
  c.running = true;
  return Status();
}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::start(const std::vector<ProcessSpec>& specs,
                                                          OnLine on_line, OnExit on_exit) {
  // Everything the children need is made before the first fork: the child
  // runs only async-signal-safe calls until exec.
  auto impl = std::make_unique<Impl>();
  for (const auto& s : specs) {
    auto p = resolve(s.program);
    if (!p.ok()) return p.status();
    impl->programs.push_back(*p);
    std::vector<std::string> argv{s.program};
    argv.insert(argv.end(), s.args.begin(), s.args.end());
    impl->argvs.push_back(std::move(argv));
    auto env = s.env;
    env.emplace_back(kLifelineEnv, std::to_string(kChildLifelineFd));
    impl->envs.push_back(child_environment(env));
  }
  impl->on_line = std::move(on_line);
  impl->on_exit = std::move(on_exit);
  int life[2];
  if (::pipe2(impl->wake, O_CLOEXEC | O_NONBLOCK) != 0 || ::pipe2(life, O_CLOEXEC) != 0) {
    return Status(Errc::unavailable, std::string("launch: pipe: ") + std::strerror(errno));
  }
  impl->lifeline = life[1];
  impl->lifeline_read = life[0];  // kept: a child started again gets it too
  impl->parent = ::getpid();
  impl->children.resize(specs.size());
  impl->again.assign(specs.size(), false);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (auto st = impl->start_child(i); !st.ok()) {
      impl->abandon();
      return st;
    }
  }
  // The pump's poll set, sized here: the pump thread allocates nothing (it
  // wakes every 100 ms for as long as a child runs).
  impl->fds.reserve(1 + 2 * impl->children.size());
  impl->owners.reserve(1 + 2 * impl->children.size());
  Impl* raw = impl.get();
  impl->pump = std::thread([raw] { raw->run(); });
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() { stop(std::chrono::seconds(5)); }

int ProcessGroup::size() const noexcept { return static_cast<int>(impl_->children.size()); }

pid_t ProcessGroup::pid(int index) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (index < 0 || index >= static_cast<int>(impl_->children.size())) return -1;
  return impl_->children[static_cast<std::size_t>(index)].pid;
}

bool ProcessGroup::running(int index) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (index < 0 || index >= static_cast<int>(impl_->children.size())) return false;
  return impl_->children[static_cast<std::size_t>(index)].running;
}

Status ProcessGroup::signal(int index, int sig) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (index < 0 || index >= static_cast<int>(impl_->children.size())) {
    return Status(Errc::out_of_range, "process " + std::to_string(index) + " outside [0, " +
                                          std::to_string(impl_->children.size()) + ")");
  }
  const auto& c = impl_->children[static_cast<std::size_t>(index)];
  if (!c.running) {
    return Status(Errc::unavailable, "process " + std::to_string(index) + " already exited");
  }
  ::kill(-c.pid, sig);
  return Status();
}

Status ProcessGroup::relaunch(int index) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (index < 0 || index >= static_cast<int>(impl_->children.size())) {
      return Status(Errc::out_of_range, "process " + std::to_string(index) + " outside [0, " +
                                            std::to_string(impl_->children.size()) + ")");
    }
    if (impl_->stopping) return Status(Errc::shutdown, "the processes are stopping");
    if (impl_->children[static_cast<std::size_t>(index)].running) {
      return Status(Errc::invalid_argument, "process " + std::to_string(index) +
                                                " is running: only one that exited starts again");
    }
    impl_->again[static_cast<std::size_t>(index)] = true;
  }
  impl_->poke();
  return Status();
}

void ProcessGroup::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->stopping) {
      impl_->stopping = true;
      const auto now = std::chrono::steady_clock::now();
      impl_->term_at = now + grace / 2;
      impl_->kill_at = now + grace;
    }
  }
  impl_->poke();
  if (impl_->pump.joinable() && impl_->pump.get_id() != std::this_thread::get_id()) {
    impl_->pump.join();
  }
}

std::string ProcessGroup::describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "stopped (status " + std::to_string(status) + ")";
}

struct LifelineWatch::Impl {
  int fd = -1;
  int wake[2] = {-1, -1};
  std::thread watcher;
  ~Impl() {
    if (wake[1] >= 0) {
      const char b = 1;
      [[maybe_unused]] auto n = ::write(wake[1], &b, 1);
    }
    if (watcher.joinable()) watcher.join();
    for (int f : {wake[0], wake[1], fd}) {
      if (f >= 0) ::close(f);
    }
  }
};

LifelineWatch::LifelineWatch() = default;
LifelineWatch::~LifelineWatch() = default;

bool LifelineWatch::start(std::function<void()> on_eof) {
  const char* v = std::getenv(kLifelineEnv);
  if (!v || impl_) return false;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || fd < 0 || ::fcntl(static_cast<int>(fd), F_GETFD) < 0) {
    return false;
  }
  impl_ = std::make_unique<Impl>();
  impl_->fd = static_cast<int>(fd);
  ::fcntl(impl_->fd, F_SETFD, FD_CLOEXEC);  // not passed on to our own children
  if (::pipe2(impl_->wake, O_CLOEXEC) != 0) {
    impl_.reset();
    return false;
  }
  Impl* raw = impl_.get();
  impl_->watcher = std::thread([raw, on_eof = std::move(on_eof)] {
    for (;;) {
      pollfd fds[2] = {{raw->fd, POLLIN, 0}, {raw->wake[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno == EINTR) continue;
      if (fds[1].revents != 0) return;  // the watch ended
      if (fds[0].revents != 0) {
        char b[64];
        const ssize_t n = ::read(raw->fd, b, sizeof(b));
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        on_eof();
        return;
      }
    }
  });
  return true;
}

}  // namespace meshstore::internal
