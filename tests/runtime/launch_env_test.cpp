#include "meshstore/launch_env.hpp"

#include <map>

#include "testing/test_util.hpp"

namespace meshstore {
namespace {

Result<LaunchEnv> parse(const std::map<std::string, std::string>& vars) {
  return LaunchEnv::from_lookup([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

const std::map<std::string, std::string> kTorchrun = {{"RANK", "3"},
                                                      {"WORLD_SIZE", "8"},
                                                      {"LOCAL_RANK", "1"},
                                                      {"LOCAL_WORLD_SIZE", "2"},
                                                      {"MASTER_ADDR", "10.1.2.3"},
                                                      {"MASTER_PORT", "29500"}};

TEST(LaunchEnv, ReadsTorchrunVariables) {
  auto env = parse(kTorchrun);
  ASSERT_OK(env);
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.1.2.3");
  EXPECT_EQ(env->master_port, 29500);
}

TEST(LaunchEnv, MissingVariableIsNamed) {
  auto vars = kTorchrun;
  vars.erase("LOCAL_RANK");
  EXPECT_ERROR(parse(vars), Errc::invalid_argument,
               "LOCAL_RANK is not set (RANK is: torchrun-style launch)");
  vars = kTorchrun;
  vars.erase("MASTER_PORT");
  EXPECT_ERROR(parse(vars), Errc::invalid_argument, "MASTER_PORT is not set");
  EXPECT_ERROR(parse({}), Errc::invalid_argument, "RANK is not set");
}

TEST(LaunchEnv, MalformedValuesAreRejected) {
  auto vars = kTorchrun;
  vars["WORLD_SIZE"] = "8x";
  EXPECT_ERROR(parse(vars), Errc::invalid_argument, "WORLD_SIZE='8x' is not an integer");
  vars = kTorchrun;
  vars["RANK"] = "8";
  EXPECT_ERROR(parse(vars), Errc::invalid_argument, "rank 8 is outside [0, 8)");
  vars = kTorchrun;
  vars["MASTER_PORT"] = "70000";
  EXPECT_ERROR(parse(vars), Errc::invalid_argument, "MASTER_PORT=70000 is outside [1, 65535]");
  vars = kTorchrun;
  vars["LOCAL_RANK"] = "2";
  EXPECT_ERROR(parse(vars), Errc::invalid_argument, "local rank 2 is outside [0, 2)");
}

TEST(LaunchEnv, FallsBackToOpenMpi) {
  auto env = parse({{"OMPI_COMM_WORLD_RANK", "5"},
                    {"OMPI_COMM_WORLD_SIZE", "6"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                    {"MASTER_ADDR", "node0"},
                    {"MASTER_PORT", "1234"}});
  ASSERT_OK(env);
  EXPECT_EQ(env->source, "openmpi");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->local_world_size, 3);
  EXPECT_ERROR(parse({{"OMPI_COMM_WORLD_RANK", "0"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
               Errc::invalid_argument,
               "MASTER_ADDR is not set (OMPI_COMM_WORLD_RANK is: openmpi-style launch)");
}

TEST(LaunchEnv, FallsBackToSlurm) {
  auto env = parse({{"SLURM_PROCID", "7"},
                    {"SLURM_NTASKS", "8"},
                    {"SLURM_LOCALID", "3"},
                    {"SLURM_TASKS_PER_NODE", "4(x2)"},
                    {"MASTER_ADDR", "node0"},
                    {"MASTER_PORT", "1234"}});
  ASSERT_OK(env);
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->rank, 7);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 4);
}

TEST(LaunchEnv, ServicePortsSitNextToMasterPortUnlessSet) {
  auto env = parse(kTorchrun).value();  // MASTER_PORT 29500
  auto none = [](const char*) -> const char* { return nullptr; };
  EXPECT_EQ(*env.service_port("MESHSTORE_PORT", 1, none), 29501);
  auto set = [](const char* v) { return [v](const char*) -> const char* { return v; }; };
  EXPECT_EQ(*env.service_port("MESHSTORE_PORT", 1, set("4000")), 4000);
  EXPECT_ERROR(env.service_port("MESHSTORE_PORT", 1, set("40x")), Errc::invalid_argument,
               "MESHSTORE_PORT='40x' is not an integer");
  EXPECT_ERROR(env.service_port("MESHSTORE_MESH_PORT", 2, set("0")), Errc::invalid_argument,
               "MESHSTORE_MESH_PORT=0 is outside [1, 65535]");
  env.master_port = 65535;
  EXPECT_ERROR(env.service_port("MESHSTORE_PORT", 1, none), Errc::invalid_argument,
               "MASTER_PORT + 1 = 65536 is not a port; set MESHSTORE_PORT");
}

TEST(LaunchEnv, TorchrunWinsOverOthers) {
  auto vars = kTorchrun;
  vars["SLURM_PROCID"] = "0";
  EXPECT_EQ(parse(vars)->source, "torchrun");
}

}  // namespace
}  // namespace meshstore
