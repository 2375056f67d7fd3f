// ctest-labels: unit
// Topology from host names (topology.h): the header's example, interleaved hosts, one host,
// one rank per host; and core_groups, the ranks of a host that share a core.
#include "heft/comm/topology.h"

#include <gtest/gtest.h>

namespace heft::comm {
namespace {

using V = std::vector<int>;

TEST(Topology, TheHeadersExample) {
  const Topology t = Topology::from_names({"a", "a", "a", "b", "b", "b", "b"}, 4);
  EXPECT_EQ(t.hosts(), 2);
  EXPECT_EQ(t.ranks_of_host, (std::vector<V>{{0, 1, 2}, {3, 4, 5, 6}}));
  EXPECT_EQ(t.host, 1);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.leaders(), (V{0, 3}));
  EXPECT_FALSE(t.uniform());
  EXPECT_TRUE(t.any_shared_host());
}

TEST(Topology, InterleavedHostsAreNumberedByTheirLowestRank) {
  const Topology t = Topology::from_names({"y", "x", "y", "x"}, 3);
  EXPECT_EQ(t.ranks_of_host, (std::vector<V>{{0, 2}, {1, 3}}));
  EXPECT_EQ(t.host_of_rank, (V{0, 1, 0, 1}));
  EXPECT_EQ(t.host, 1);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_TRUE(t.uniform());
  EXPECT_EQ(t.column(0), (V{0, 1}));
  EXPECT_EQ(t.column(1), (V{2, 3}));
}

TEST(Topology, OneHostAndOneRankPerHost) {
  const Topology one = Topology::from_names({"h", "h", "h"}, 2);
  EXPECT_EQ(one.hosts(), 1);
  EXPECT_EQ(one.local_size(), 3);
  EXPECT_EQ(one.leaders(), (V{0}));
  const Topology spread = Topology::from_names({"a", "b", "c"}, 1);
  EXPECT_EQ(spread.hosts(), 3);
  EXPECT_FALSE(spread.any_shared_host());
  EXPECT_TRUE(spread.uniform());
  EXPECT_EQ(spread.local_size(), 1);
}

using Groups = std::vector<std::vector<int>>;

TEST(CoreGroups, FromTheCpuEachRankIsBoundTo) {
  // HEFT_BIND=pack's 4 ranks on CPUs 0-1, and 3 ranks on 2 CPUs (one alone on its core).
  EXPECT_EQ(core_groups({0, 0, 1, 1}, -1), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(core_groups({4, 4, 7}, -1), (Groups{{0, 1}, {2}}));
  // Groups in the order their CPUs first appear, ranks ascending within each.
  EXPECT_EQ(core_groups({1, 0, 1, 0}, -1), (Groups{{0, 2}, {1, 3}}));
}

TEST(CoreGroups, NoneWhereThereIsNothingToShare) {
  EXPECT_EQ(core_groups({0, 1}, -1), Groups{});         // one rank per core
  EXPECT_EQ(core_groups({0, 0, 0}, -1), Groups{});      // one core for all: no step across
  EXPECT_EQ(core_groups({0, -1, 1, 1}, -1), Groups{});  // a rank that may run anywhere
  EXPECT_EQ(core_groups({0, 0, 1, 1}, 0), Groups{});    // HEFT_SHM_CORES=off
  EXPECT_EQ(core_groups({}, -1), Groups{});
}

TEST(CoreGroups, ForcedGroupSize) {
  // Consecutive local ranks, whatever the CPUs say.
  EXPECT_EQ(core_groups({-1, -1, -1, -1, -1}, 2), (Groups{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(core_groups({0, 1, 2, 3, 4, 5, 6}, 3), (Groups{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(core_groups({0, 0, 1}, 1), Groups{});  // groups of one: nothing to share
  EXPECT_EQ(core_groups({0, 0, 1}, 3), Groups{});  // a single group
}

}  // namespace
}  // namespace heft::comm
