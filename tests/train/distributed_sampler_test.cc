// DistributedSampler: the ranks' shares partition each global batch, epochs are seeded
// permutations, and the last partial batch is handled the same on every rank.
#include "heft/train/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "heft/error.h"

namespace heft::train {
namespace {

DistributedSampler make(int64_t size, int64_t batch, int rank, int world, int64_t limit = 0,
                        uint64_t seed = 3) {
  DistributedSampler::Options o;
  o.dataset_size = size;
  o.global_batch = batch;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  o.limit = limit;
  return DistributedSampler(o);
}

TEST(DistributedSampler, SharesPartitionEveryGlobalBatchOnWorldSizes1To7) {
  for (int world : {1, 2, 3, 4, 7}) {
    const int64_t size = 101, batch = 14;
    std::vector<DistributedSampler> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(make(size, batch, r, world));
    for (int64_t epoch : {0, 1}) {
      std::vector<int64_t> seen;
      for (auto& s : ranks) s.set_epoch(epoch);
      for (int64_t step = 0; step < ranks[0].steps_per_epoch(); ++step) {
        std::vector<int64_t> joined;
        for (int r = 0; r < world; ++r) {
          auto b = ranks[r].batch(step);
          EXPECT_EQ(ranks[r].steps_per_epoch(), ranks[0].steps_per_epoch());
          joined.insert(joined.end(), b.indices.begin(), b.indices.end());
          EXPECT_EQ(b.global_size, static_cast<int64_t>(ranks[0].global_batch(step).size()));
        }
        EXPECT_EQ(joined, ranks[0].global_batch(step)) << "world " << world << " step " << step;
        seen.insert(seen.end(), joined.begin(), joined.end());
      }
      std::set<int64_t> unique(seen.begin(), seen.end());
      EXPECT_EQ(unique.size(), seen.size()) << "a sample twice in one epoch, world " << world;
      EXPECT_EQ(static_cast<int64_t>(seen.size()),
                ranks[0].samples_per_epoch() - (ranks[0].samples_per_epoch() % batch < world
                                                    ? ranks[0].samples_per_epoch() % batch
                                                    : 0));
    }
  }
}

TEST(DistributedSampler, EpochsAreSeededPermutations) {
  auto a = DistributedSampler::permutation(1000, 42, 0);
  EXPECT_EQ(a, DistributedSampler::permutation(1000, 42, 0));
  EXPECT_NE(a, DistributedSampler::permutation(1000, 42, 1));
  EXPECT_NE(a, DistributedSampler::permutation(1000, 43, 0));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  // Two samplers with the same seed agree, whatever their rank.
  auto s0 = make(1000, 10, 0, 2), s1 = make(1000, 10, 1, 2);
  s0.set_epoch(5);
  s1.set_epoch(5);
  EXPECT_EQ(s0.global_batch(3), s1.global_batch(3));
}

TEST(DistributedSampler, LastPartialBatchIsSplitTheSameWayOnEveryRank) {
  // 43 samples, batch 12: 3 full batches and one of 7; on 4 ranks 2 + 2 + 2 + 1.
  std::vector<size_t> sizes;
  for (int r = 0; r < 4; ++r) {
    auto s = make(43, 12, r, 4);
    EXPECT_EQ(s.steps_per_epoch(), 4);
    auto b = s.batch(3);
    EXPECT_EQ(b.global_size, 7);
    sizes.push_back(b.indices.size());
    EXPECT_NEAR(b.loss_weight(), b.indices.size() * 4.0 / 7.0, 1e-12);
    EXPECT_EQ(s.batch(0).loss_weight(), 1.0);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 2, 1}));
  // A remainder smaller than the number of ranks is dropped, on every rank.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(make(39, 12, r, 4).steps_per_epoch(), 3);
  EXPECT_EQ(make(40, 12, 0, 4).steps_per_epoch(), 4);
}

TEST(DistributedSampler, LimitTakesTheFirstSamplesOfTheEpochPermutation) {
  auto s = make(1000, 64, 0, 2, 256);
  EXPECT_EQ(s.samples_per_epoch(), 256);
  EXPECT_EQ(s.steps_per_epoch(), 4);
  auto perm = DistributedSampler::permutation(1000, 3, 0);
  EXPECT_EQ(s.global_batch(1), std::vector<int64_t>(perm.begin() + 64, perm.begin() + 128));
  EXPECT_EQ(make(100, 64, 0, 2, 5000).samples_per_epoch(), 100);
}

TEST(DistributedSampler, RejectsImpossibleOptionsNamingThem) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message([] { make(100, 3, 0, 4); }),
            "DistributedSampler: the global batch (3) must be at least the number of ranks (4)");
  EXPECT_EQ(message([] { make(100, 8, 4, 4); }), "DistributedSampler: rank 4 is outside 0..3");
  EXPECT_EQ(message([] { make(0, 8, 0, 1); }),
            "DistributedSampler: the data set is empty (dataset_size 0)");
  EXPECT_EQ(message([] { make(3, 8, 0, 4); }),
            "DistributedSampler: an epoch of 3 samples has no step with at least 4 samples");
  EXPECT_EQ(message([] { make(100, 8, 0, 1).batch(13); }),
            "DistributedSampler: step 13 is outside 0..12");
}

}  // namespace
}  // namespace heft::train
