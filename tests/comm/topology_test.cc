// ctest-labels: unit
// Topology from host names (topology.h): the header's example, interleaved hosts, one host,
// one rank per host.
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

}  // namespace
}  // namespace heft::comm
