// ctest-labels: multiproc
// The device mesh (parallel/mesh.h): coordinates and groups for every placement order on 8
// and 16 ranks, the worked example of the header, hybrid shard/replicate groups, clear
// errors; then real ranks: a collective on each dimension's group reaches exactly the ranks
// the layout says, and with tracing on each rank labels its groups by dimension for the hang
// diagnosis (rank-<R>.groups.json beside the traces).
#include "heft/parallel/mesh.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "heft/error.h"
#include "support/ranks.h"

namespace heft::parallel {
namespace {

using test::expect;

const char* kOrders[] = {"DPT", "DTP", "PDT", "PTD", "TDP", "TPD", "cluster", "spread"};
const Dim kDims[] = {Dim::kData, Dim::kPipeline, Dim::kTensor, Dim::kShard, Dim::kReplicate};

void check_layout(const MeshLayout& m) {
  const std::string& order = m.order();
  for (Dim d : kDims) {
    std::set<int> covered;
    for (int r = 0; r < m.world(); ++r) {
      const std::vector<int> g = m.group(r, d);
      ASSERT_EQ(static_cast<int>(g.size()), m.size(d)) << order << " " << name(d);
      // rank r is in its own group at its coordinate; members differ only along d
      ASSERT_EQ(g[m.coordinate(r, d)], r) << order << " " << name(d) << " rank " << r;
      for (int q : g) {
        EXPECT_EQ(m.group(q, d), g) << order << " " << name(d);
        if (d == Dim::kData || d == Dim::kShard || d == Dim::kReplicate) {
          EXPECT_EQ(m.coordinate(q, Dim::kPipeline), m.coordinate(r, Dim::kPipeline));
          EXPECT_EQ(m.coordinate(q, Dim::kTensor), m.coordinate(r, Dim::kTensor));
        } else {
          EXPECT_EQ(m.coordinate(q, Dim::kData), m.coordinate(r, Dim::kData));
          EXPECT_EQ(m.coordinate(q, d == Dim::kTensor ? Dim::kPipeline : Dim::kTensor),
                    m.coordinate(r, d == Dim::kTensor ? Dim::kPipeline : Dim::kTensor));
        }
      }
      covered.insert(g.begin(), g.end());
    }
    EXPECT_EQ(static_cast<int>(covered.size()), m.world()) << order << " " << name(d);
  }
  // The right-most letter varies fastest over consecutive ranks.
  const Dim fastest = order.back() == 'D' ? Dim::kData : order.back() == 'P' ? Dim::kPipeline
                                                                          : Dim::kTensor;
  if (m.size(fastest) > 1) {
    EXPECT_EQ(m.coordinate(0, fastest), 0);
    EXPECT_EQ(m.coordinate(1, fastest), 1) << order;
  }
  for (int r = 0; r < m.world(); ++r)
    EXPECT_EQ(m.rank_at(m.coordinate(r, Dim::kData), m.coordinate(r, Dim::kPipeline),
                        m.coordinate(r, Dim::kTensor)), r);
}

TEST(MeshLayout, EveryPlacementOrderOn8And16Ranks) {
  for (const char* order : kOrders) {
    check_layout(MeshLayout(8, {2, 2, 2, 0, order}));
    check_layout(MeshLayout(16, {2, 4, 2, 0, order}));
    check_layout(MeshLayout(16, {4, 2, 2, 2, order}));  // hybrid: shard 2, replicate 2
    check_layout(MeshLayout(16, {8, 1, 2, 4, order}));
  }
}

TEST(MeshLayout, TheWorkedExampleOfTheHeader) {
  const MeshLayout cluster(16, {2, 4, 2, 0, "cluster"});
  EXPECT_EQ(cluster.order(), "DPT");
  EXPECT_EQ(cluster.group(2, Dim::kTensor), (std::vector<int>{2, 3}));
  EXPECT_EQ(cluster.group(3, Dim::kPipeline), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(cluster.group(12, Dim::kPipeline), (std::vector<int>{8, 10, 12, 14}));
  EXPECT_EQ(cluster.group(5, Dim::kData), (std::vector<int>{5, 13}));
  const MeshLayout spread(16, {2, 4, 2, 0, "spread"});
  EXPECT_EQ(spread.order(), "TPD");
  EXPECT_EQ(spread.group(0, Dim::kTensor), (std::vector<int>{0, 8}));
  EXPECT_EQ(spread.group(1, Dim::kPipeline), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(spread.group(2, Dim::kData), (std::vector<int>{2, 3}));
  EXPECT_NE(cluster.describe().find("tensor (2): {0,1} {2,3} {4,5}"), std::string::npos)
      << cluster.describe();
}

TEST(MeshLayout, HybridShardGroupsAreContiguousInTheDataIndex) {
  const MeshLayout m(8, {8, 1, 1, 4, "cluster"});
  EXPECT_EQ(m.group(5, Dim::kShard), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(m.group(5, Dim::kReplicate), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.coordinate(5, Dim::kShard), 1);
  EXPECT_EQ(m.coordinate(5, Dim::kReplicate), 1);
}

TEST(MeshLayout, BadShapesNameTheField) {
  auto message = [](int world, MeshShape s) -> std::string {
    try {
      MeshLayout m(world, s);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message(8, {2, 2, 2, 0, "PDX"}),
            "placement_strategy: expected cluster, spread or an order of the letters D, P and "
            "T (such as DTP), found 'PDX'");
  EXPECT_EQ(message(8, {4, 1, 2, 3, "cluster"}),
            "sharded_data_parallel_degree: expected a divisor of the data parallel degree 4, "
            "found 3");
  EXPECT_EQ(message(8, {2, 2, 1, 0, "cluster"}),
            "the mesh: data 2 x pipeline 2 x tensor 1 = 4 ranks, but the world has 8");
  EXPECT_EQ(message(8, {8, 1, 0, 0, "cluster"}),
            "tensor_parallel_degree: expected at least 1, found 0");
}

// Each rank adds its bit in every group: the sum is exactly the group's members.
TEST(DeviceMesh, ACollectiveOnEachDimensionReachesExactlyItsGroup) {
  for (MeshShape shape : {MeshShape{2, 2, 2, 0, "cluster"}, MeshShape{4, 1, 2, 2, "TDP"}}) {
    test::StoreProcess store;
    auto res = test::run_world(8, store, [shape](comm::Communicator& c) {
      torch::set_num_threads(1);
      DeviceMesh mesh(c, shape);
      for (Dim d : kDims) {
        torch::Tensor bit = torch::tensor({int64_t{1} << c.rank()});
        mesh.group(d).allreduce(bit);
        int64_t want = 0;
        for (int q : mesh.layout().group(c.rank(), d)) want |= int64_t{1} << q;
        expect(bit.item<int64_t>() == want, std::string(name(d)) + " group of rank " +
                                                std::to_string(c.rank()) + ": got mask " +
                                                std::to_string(bit.item<int64_t>()) +
                                                ", expected " + std::to_string(want));
        expect(mesh.group(d).rank() == mesh.coordinate(d), "rank in the group = coordinate");
      }
    });
    EXPECT_TRUE(res.all_ok()) << shape.placement << ": " << res.summary();
  }
}

TEST(MeshLayout, GroupLabelsNameEachDimensionsGroupWithItsMembers) {
  const MeshLayout m(8, {2, 2, 2, 0, "cluster"});  // rank = d*4 + p*2 + t
  const std::array<std::string, 5> names = {"j/world/split0/1", "j/world/split1/1",
                                            "j/world/split2/2", "j/world/split3/3",
                                            "j/world/split4/3"};
  const nlohmann::json j = nlohmann::json::parse(group_labels_json(m, 3, names));
  EXPECT_EQ(j["world_rank"], 3);
  ASSERT_EQ(j["groups"].size(), 5u);
  const char* dims[] = {"data", "pipeline", "tensor", "replicate", "shard"};
  const std::vector<std::vector<int>> members = {{3, 7}, {1, 3}, {2, 3}, {3}, {3, 7}};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(j["groups"][i]["dimension"], dims[i]);
    EXPECT_EQ(j["groups"][i]["group"], names[i]);
    EXPECT_EQ(j["groups"][i]["ranks"].get<std::vector<int>>(), members[i]) << dims[i];
  }
  // Names are JSON strings, whatever they hold.
  const std::array<std::string, 5> odd = {"a\"b\\c", "x", "x", "x", "x"};
  EXPECT_EQ(nlohmann::json::parse(group_labels_json(m, 0, odd))["groups"][0]["group"], "a\"b\\c");
}

// With HEFT_TRACE_DIR set, each rank writes its labels, naming the very communicators whose
// traces the diagnosis reads (the file rank-<R>.<group, '/' as '+'>.trace).
TEST(DeviceMesh, WithTracingOnEachRankLabelsItsGroupsByDimension) {
  namespace fs = std::filesystem;
  const std::string dir = fs::temp_directory_path() / ("heft-mesh-labels-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::setenv("HEFT_TRACE_DIR", dir.c_str(), 1);
  test::StoreProcess store;
  auto res = test::run_world(8, store, [&dir](comm::Communicator& c) {
    ::setenv("RANK", std::to_string(c.rank()).c_str(), 1);  // as a launcher sets it
    DeviceMesh mesh(c, {2, 2, 2, 0, "cluster"});
    std::ifstream in(dir + "/rank-" + std::to_string(c.rank()) + ".groups.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    expect(j["world_rank"] == c.rank(), "world_rank: " + j.dump());
    for (size_t i = 0; i < j["groups"].size(); ++i) {
      const nlohmann::json& g = j["groups"][i];
      const Dim d = static_cast<Dim>(i);  // data, pipeline, tensor, replicate, shard
      expect(g["dimension"] == name(d), "dimension " + std::to_string(i) + ": " + g.dump());
      expect(g["ranks"].get<std::vector<int>>() == mesh.layout().group(c.rank(), d),
             std::string(name(d)) + " members: " + g.dump());
      const std::string group = g["group"].get<std::string>();
      expect(group == mesh.group_name(d), std::string(name(d)) + ": " + group);
      expect(group.find("/split") != std::string::npos, "a split: " + group);
      std::string file = group;
      for (char& ch : file)
        if (ch == '/') ch = '+';
      const std::string trace = dir + "/rank-" + std::to_string(c.rank()) + "." + file + ".trace";
      expect(fs::exists(trace), "no trace " + trace + " for the " + name(d) + " group");
    }
    expect(j["groups"].size() == 5, "5 dimensions: " + j.dump());
  });
  ::unsetenv("HEFT_TRACE_DIR");
  EXPECT_TRUE(res.all_ok()) << res.summary();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace heft::parallel
