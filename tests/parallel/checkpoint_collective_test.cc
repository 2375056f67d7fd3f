// ctest-labels: multiproc
// Multi-writer checkpoints over real ranks (checkpoint_collective.h): every rank saves its
// part; a writer killed between its part and the commit leaves the previous checkpoint
// loadable, and no stray files after the next save.
#include "heft/parallel/checkpoint_collective.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "heft/error.h"
#include "support/ranks.h"

namespace heft::parallel {
namespace {

namespace fs = std::filesystem;
using test::expect;

TEST(CheckpointCollective, AWriterKilledBeforeTheCommitLeavesThePreviousCheckpointWhole) {
  const fs::path dir = fs::temp_directory_path() / ("heft-ckpt-collective-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string d = dir.string();
  comm::CommunicatorOptions options;
  options.timeout = std::chrono::seconds(30);
  auto part_of = [](int rank, int64_t step) {
    return std::map<std::string, std::string>{
        {"shard.bin", std::string(1000 + rank, static_cast<char>('a' + rank)) + std::to_string(step)}};
  };
  {  // step 10 by all three; then step 20, where rank 2 dies after writing its part
    test::StoreProcess store;
    auto res = test::run_world(3, store, [&](comm::Communicator& c) {
      ProcessGroup g(c);
      CheckpointDirectory ckpt(d, 2);
      save_collective(g, ckpt, 10, "{\"step\":10}", part_of(g.rank(), 10));
      if (g.rank() == 2) {
        ckpt.save_part(20, 2, part_of(2, 20));
        ::_exit(9);  // killed between its part and the commit
      }
      try {
        save_collective(g, ckpt, 20, "{\"step\":20}", part_of(g.rank(), 20));
        expect(false, "step 20 committed without rank 2");
      } catch (const heft::PeerLost&) {
      }
    }, options);
    ASSERT_EQ(res.ranks.size(), 3u);
    EXPECT_EQ(res.ranks[0].exit_code, 0) << res.summary();
    EXPECT_EQ(res.ranks[1].exit_code, 0) << res.summary();
  }
  CheckpointDirectory ckpt(d, 2);
  for (int k = 0; k < 3; ++k) {
    const auto got = ckpt.load_latest_part(k);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->step, 10);
    EXPECT_EQ(got->files.at("shard.bin"), part_of(k, 10).at("shard.bin"));
  }
  {  // a new group saves step 30: step 20's leftovers are gone, nothing stray remains
    test::StoreProcess store;
    auto res = test::run_world(3, store, [&](comm::Communicator& c) {
      ProcessGroup g(c);
      save_collective(g, CheckpointDirectory(d, 2), 30, "{\"step\":30}", part_of(g.rank(), 30));
    }, options);
    EXPECT_TRUE(res.all_ok()) << res.summary();
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-000000000010", "ckpt-000000000030"}));
  EXPECT_EQ(ckpt.load_latest_part(2)->step, 30);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace heft::parallel
