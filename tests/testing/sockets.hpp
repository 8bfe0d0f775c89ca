#pragma once

// Which TCP sockets a process holds, read from /proc: tests of direct
// connections check that two processes hold a connection of their own
// rather than reaching each other through a third.

#include <dirent.h>
#include <unistd.h>

#include <fstream>
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

}  // namespace meshstore::testing
