// The host figures the layout search takes (host/host.h): a runnable
// thread's weight from its /proc stat line (nice 0 a whole core, nice 19 1.25^-19, asleep
// none, a command name holding ") R " read past), another autogroup's by its group's nice, this
// process's resident bytes and the
// host's available memory positive, and a sampled load that is a finite number >= 0.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "heft/host/host.h"

namespace {

namespace host = heft::host;

// A stat line as the kernel writes it, with `state` and `nice` in fields 3 and 19.
std::string stat_line(const std::string& comm, const std::string& state, int nice) {
  return "4242 (" + comm + ") " + state + " 1 4242 4242 0 -1 4194560 100 0 0 0 12 3 0 0 " +
         std::to_string(20 + nice) + " " + std::to_string(nice) + " 1 0 12345 1000000 200";
}

TEST(HostMemory, ARunnableThreadWeighsItsNice) {
  EXPECT_DOUBLE_EQ(host::stat_runnable_weight(stat_line("python3", "R", 0)), 1.0);
  EXPECT_NEAR(host::stat_runnable_weight(stat_line("cc1plus", "R", 19)), std::pow(1.25, -19), 1e-12);
  EXPECT_NEAR(host::stat_runnable_weight(stat_line("heft-train", "R", -5)), std::pow(1.25, 5), 1e-12);
  EXPECT_EQ(host::stat_runnable_weight(stat_line("python3", "S", 0)), 0.0);
  EXPECT_EQ(host::stat_runnable_weight(stat_line("a ) R (b", "S", 0)), 0.0);  // the name is not the state
  EXPECT_EQ(host::stat_runnable_weight(stat_line("a ) S (b", "R", 19)), std::pow(1.25, -19));
  EXPECT_EQ(host::stat_runnable_weight("4242 (cut"), 0.0);
  EXPECT_EQ(host::stat_runnable_weight("4242 (x) R 1 2"), 0.0);  // too short: no nice field
}

// Regression (bench/auto_layout.sh run in a session of autogroup nice -20 on a shared host:
// the others' threads counted as whole cores, the predictions 50-200% high): another
// autogroup's thread weighs its group's nice against ours, whatever its own nice.
TEST(HostMemory, AnotherAutogroupWeighsItsGroupsNice) {
  EXPECT_DOUBLE_EQ(host::autogroup_weight("/autogroup-7 nice 0", "/autogroup-9 nice 0"), 1.0);
  EXPECT_NEAR(host::autogroup_weight("/autogroup-7 nice -20", "/autogroup-9 nice 0"), std::pow(1.25, -20), 1e-15);
  EXPECT_NEAR(host::autogroup_weight("/autogroup-7 nice 0", "/autogroup-9 nice 19"), std::pow(1.25, -19), 1e-15);
  // A heavier group's thread still runs on one core: at most a whole one of ours (regression:
  // a test run at nice 0 beside bench sessions of nice -20 counted load 160 on 2 cores).
  EXPECT_EQ(host::autogroup_weight("/autogroup-7 nice 0", "/autogroup-9 nice -20"), 1.0);
  EXPECT_EQ(host::autogroup_weight("/autogroup-7 nice 0", "/autogroup-7 nice 0"), -1);  // ours: its own nice
  EXPECT_EQ(host::autogroup_weight("", "/autogroup-9 nice 0"), -1);                     // no autogroups
  EXPECT_EQ(host::autogroup_weight("/autogroup-7 nice 0", "garbage"), -1);
}

TEST(HostMemory, ThisProcessAndHostArePositive) {
  // The calling thread's own stat line: it is running now.
  std::ifstream in("/proc/thread-self/stat");
  std::string self;
  ASSERT_TRUE(std::getline(in, self));
  EXPECT_GT(host::stat_runnable_weight(self), 0.0) << self;
  EXPECT_GT(host::resident_bytes(), 1 << 20);
  std::string source;
  EXPECT_GT(host::available_memory(&source), 0);
  EXPECT_FALSE(source.empty());
  const double load = host::runnable_elsewhere(3, 1);
  EXPECT_TRUE(std::isfinite(load) && load >= 0) << load;
}

// The GPUs a worker sees, from a fake /proc holding the NVIDIA driver's folder of 3 devices:
// all 3 without CUDA_VISIBLE_DEVICES; the listed ones up to the first that names no device;
// none for "" or "-1"; none without the driver (this machine's /proc has no NVIDIA driver, or
// the count is its GPUs).
TEST(HostGpus, TheDriversDevicesNarrowedByCudaVisibleDevices) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("heft-host-gpus-" + std::to_string(getpid()));
  fs::remove_all(root);
  for (const char* bus : {"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"})
    fs::create_directories(root / "driver" / "nvidia" / "gpus" / bus);
  const std::string r = root.string();
  EXPECT_EQ(host::visible_gpus(r, nullptr), 3);
  EXPECT_EQ(host::visible_gpus(r, "0,2"), 2);
  EXPECT_EQ(host::visible_gpus(r, "1"), 1);
  EXPECT_EQ(host::visible_gpus(r, "0,7,1"), 1);  // 7 names no device: the runtime stops there
  EXPECT_EQ(host::visible_gpus(r, " 2 , 0"), 2);
  EXPECT_EQ(host::visible_gpus(r, "GPU-8f3e2a1c,1"), 2);
  EXPECT_EQ(host::visible_gpus(r, "0,1,2,0"), 3);  // never more than the devices
  EXPECT_EQ(host::visible_gpus(r, ""), 0);
  EXPECT_EQ(host::visible_gpus(r, "-1"), 0);
  EXPECT_EQ(host::visible_gpus(r, "x"), 0);
  EXPECT_EQ(host::visible_gpus((root / "none").string(), nullptr), 0);
  EXPECT_EQ(host::visible_gpus((root / "none").string(), "0,1"), 0);
  fs::remove_all(root);
  if (!fs::exists("/proc/driver/nvidia/gpus")) {
    EXPECT_EQ(host::visible_gpus("/proc", nullptr), 0);
  }
}

}  // namespace
