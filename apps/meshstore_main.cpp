// meshstore: the command-line tool. Subcommands grow with the project; each
// is listed by --help.

#include <google/protobuf/stubs/common.h>
#include <spdlog/version.h>

#include <caf/config.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "meshstore/store.hpp"
#include "meshstore/version.hpp"

namespace {

void print_help(std::FILE* out) {
  std::fprintf(out,
               "meshstore %s: a distributed tensor store on CAF actors\n"
               "\n"
               "usage: meshstore <command> [options]\n"
               "       meshstore --version | --help\n"
               "\n"
               "commands:\n"
               "  version   print the version\n"
               "  info      print the build: dependencies, transports, optional features\n"
               "  help      print this help\n"
               "\n"
               "Programs next to this one in build/bin: hello_store (the embedded-store demo),\n"
               "store_bench (benchmarks). Docs: docs/architecture.md, docs/errors.md.\n",
               meshstore::version());
}

void print_info() {
  std::printf("meshstore %s\n", meshstore::version());
  std::printf("  CAF         %d.%d.%d\n", CAF_VERSION / 10000, (CAF_VERSION / 100) % 100,
              CAF_VERSION % 100);
  std::printf("  Protobuf    %s\n",
              google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION).c_str());
  std::printf("  spdlog      %d.%d.%d\n", SPDLOG_VER_MAJOR, SPDLOG_VER_MINOR, SPDLOG_VER_PATCH);
  std::printf("  transports ");
  for (const auto& t : meshstore::Store::available_transports()) std::printf(" %s", t.c_str());
  std::printf("\n");
  std::printf("  RDMA build  %s\n",
              MESHSTORE_BUILD_RDMA ? "libibverbs found (transport not written yet)" : "off");
  std::printf("  CUDA build  %s\n",
              MESHSTORE_BUILD_CUDA ? "toolkit found (transport not written yet)" : "off");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("meshstore %s\n", meshstore::version());
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    print_help(stdout);
    return 0;
  }
  if (cmd == "info") {
    print_info();
    return 0;
  }
  std::fprintf(stderr, "meshstore: unknown command '%s'\n\n", cmd.c_str());
  print_help(stderr);
  return 2;
}
