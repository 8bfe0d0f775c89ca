#pragma once

// Which TCP sockets a process holds, read from /proc: tests of direct
// connections check that two processes hold a connection of their own
// rather than reaching each other through a third. And a free port for a
// test's listener.

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

namespace meshstore::testing {

// The socket inodes process `pid` holds.
inline std::set<std::string> socket_inodes(int pid) {
  std::set<std::string> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (auto* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      char target[256];
      const auto n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      const std::string link(target, static_cast<std::size_t>(n));
      if (link.rfind("socket:[", 0) == 0) out.insert(link.substr(8, link.size() - 9));
    }
    ::closedir(d);
  }
  return out;
}

// From /proc/net/tcp and tcp6, the ports of sockets in `inodes` in state
// `state` (0A listening, 01 established): their local port, or with
// `remote` the peer's.
inline std::set<int> tcp_ports(const std::set<std::string>& inodes, const std::string& state,
                               bool remote) {
  std::set<int> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, peer, st, queues, timer, retr, uid, timeout, inode;
      row >> slot >> local >> peer >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st != state || !inodes.count(inode)) continue;
      const std::string& addr = remote ? peer : local;
      out.insert(static_cast<int>(std::stol(addr.substr(addr.rfind(':') + 1), nullptr, 16)));
    }
  }
  return out;
}

// The ports process `from` is connected to (established) that process `to`
// listens on: their connections of their own, from `from`'s side.
inline std::set<int> connected_ports(int from, int to) {
  const auto listening = tcp_ports(socket_inodes(to), "0A", false);
  std::set<int> out;
  for (int p : tcp_ports(socket_inodes(from), "01", true)) {
    if (listening.count(p)) out.insert(p);
  }
  return out;
}

// A loopback port free now, for a listener a test starts later (a server
// process, a rank's registry), or 0 if none was found. Taken at random
// below the kernel's ephemeral range (32768 and up on Debian), so that no
// outgoing connection of another process takes it meanwhile, as one may a
// port the kernel picked for port 0.
inline std::uint16_t free_port() {
  std::mt19937 pick(std::random_device{}());
  std::uniform_int_distribution<int> in_range(20000, 28999);
  for (int i = 0; i < 200; ++i) {
    const auto port = static_cast<std::uint16_t>(in_range(pick));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));  // as the listener will
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

}  // namespace meshstore::testing
