// ctest-labels: unit
// The layout search on synthetic costs with known optima: with free communication the most
// data-parallel layout wins (and its step time is the compute divided by the world); with
// parameters too large for one rank only sharded, tensor or pipelined layouts are ranked,
// none over the limit, and plain DDP is dropped naming its memory and the limit; with an
// expensive all-reduce the pure pipeline wins; a tensor degree that does not divide the heads
// is dropped with that reason; the same inputs give the same ranking (ties in enumeration
// order); a model that fits nowhere is an error naming the smallest memory it would need; the
// comm table's group lookup; the memory of known layouts, exactly; the host's contention
// (busy ranks and load over cores), the optimizer's share, a step's transient bytes and the
// sharded layers' own collectives; the largest tensor's copies in and after the backward, the
// retained transient and rank 0's profile.
#include "heft/parallel/layout/layout_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "heft/error.h"

namespace heft::parallel::layout {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// 8 equal layers: 1 ms forward, 2 ms backward per sample.
ModelCost model(int64_t param_bytes, int64_t activation_bytes) {
  ModelCost m;
  for (int i = 0; i < 8; ++i)
    m.layers.push_back({"layer" + std::to_string(i), 1e-3, 2e-3, param_bytes, activation_bytes});
  m.profiled_batch = 1;
  m.optimizer_bytes_per_param_byte = 2;
  m.saved_activation_factor = 1;
  return m;
}

CommTable table(double allreduce_beta, double gather_beta, double p2p_beta) {
  CommTable t;
  for (int g : {2, 4}) {
    t.entries.push_back({Collective::kAllReduce, g, 0, allreduce_beta});
    t.entries.push_back({Collective::kReduceScatter, g, 0, gather_beta});
    t.entries.push_back({Collective::kAllGather, g, 0, gather_beta});
  }
  t.entries.push_back({Collective::kP2P, 2, 0, p2p_beta});
  return t;
}

SearchOptions options(int64_t limit) {
  SearchOptions o;
  o.world = 4;
  o.memory_limit_bytes = limit;
  o.global_batch = 16;
  return o;
}

bool plain_ddp(const Layout& l) { return l.sharded == 1 && l.tensor == 1 && l.pipeline == 1; }

TEST(LayoutSearch, PureComputeTheMostDataParallelWins) {
  const SearchResult r = search(model(1000, 1000), table(kInf, kInf, kInf), options(int64_t{1} << 40));
  ASSERT_FALSE(r.ranked.empty());
  const Prediction& best = r.ranked.front();
  EXPECT_EQ(best.layout.data, 4) << to_string(best.layout);
  EXPECT_EQ(best.layout.microbatches, 1);
  EXPECT_FALSE(best.layout.checkpointing);
  // 16 samples / 4 replicas x 8 layers x 3 ms.
  EXPECT_NEAR(best.step_s, 4 * 8 * 3e-3, 1e-12);
  for (const Prediction& p : r.ranked) {
    EXPECT_GE(p.step_s, best.step_s - 1e-12);
    if (p.layout.pipeline > 1) {
      EXPECT_GT(p.step_s, best.step_s * 1.01) << to_string(p.layout);  // the bubble
    }
    if (p.layout.checkpointing) {
      EXPECT_GT(p.step_s, best.step_s * 1.2) << to_string(p.layout);  // the recompute
    }
  }
}

TEST(LayoutSearch, MemoryBoundOnlyShardedTensorOrPipelineFit) {
  const int64_t gb = 1000000000;
  const int64_t limit = 12 * gb;  // one replica: 8 GB params x (param + grad + 2 adam) = 32 GB
  const SearchResult r = search(model(gb, 1000), table(1e10, 1e10, 1e10), options(limit));
  ASSERT_FALSE(r.ranked.empty());
  for (const Prediction& p : r.ranked) {
    EXPECT_LE(p.memory_bytes, limit) << to_string(p.layout);
    EXPECT_FALSE(plain_ddp(p.layout)) << to_string(p.layout);
    EXPECT_EQ(p.layout.data, 1) << to_string(p.layout);  // two replicas of anything hold >= 16 GB
  }
  bool ddp_dropped = false;
  for (const Dropped& d : r.dropped)
    if (d.layout.data == 4 && d.layout.microbatches == 1 && !d.layout.checkpointing) {
      ddp_dropped = true;
      EXPECT_EQ(d.reason, "memory 32.0 GB > limit 12.0 GB");
    }
  EXPECT_TRUE(ddp_dropped);
}

TEST(LayoutSearch, CommunicationBoundThePipelineWins) {
  // Gradients of 8 MB at 1 MB/s (8 s); tensor all-reduces of 10 kB activations at 1 MB/s
  // (10 ms each); p2p nearly free.
  const SearchResult r = search(model(1000000, 10000), table(1e6, 1e6, 1e12), options(int64_t{1} << 40));
  const Prediction& best = r.ranked.front();
  EXPECT_EQ(best.layout.pipeline, 4) << to_string(best.layout);
  EXPECT_EQ(best.layout.data * best.layout.sharded * best.layout.tensor, 1);
  EXPECT_EQ(best.gradient_comm_s, 0);
  EXPECT_GT(best.bubble, 0);
  for (const Prediction& p : r.ranked)
    if (p.layout.data > 1) {
      EXPECT_GT(p.step_s, 1.0) << to_string(p.layout);  // an all-reduce of >= 2 MB
    }
}

TEST(LayoutSearch, TensorMustDivideTheHeads) {
  ModelCost m = model(1000, 1000);
  m.heads = 6;
  const SearchResult r = search(m, table(1e9, 1e9, 1e9), options(int64_t{1} << 40));
  for (const Prediction& p : r.ranked) EXPECT_NE(p.layout.tensor, 4);
  bool dropped = false, tensor2 = false;
  for (const Dropped& d : r.dropped)
    if (d.layout.tensor == 4) dropped = d.reason == "tensor 4 does not divide heads 6";
  for (const Prediction& p : r.ranked) tensor2 = tensor2 || p.layout.tensor == 2;
  EXPECT_TRUE(dropped);
  EXPECT_TRUE(tensor2);
}

TEST(LayoutSearch, DeterministicWithTiesInEnumerationOrder) {
  const ModelCost m = model(1000, 1000);
  const CommTable t = table(kInf, kInf, kInf);
  const SearchResult a = search(m, t, options(int64_t{1} << 40));
  const SearchResult b = search(m, t, options(int64_t{1} << 40));
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_EQ(to_string(a.ranked[i].layout), to_string(b.ranked[i].layout));
    EXPECT_EQ(a.ranked[i].step_s, b.ranked[i].step_s);
  }
  // Free communication: data 4 (m 1, 2, 4), data 2 x tensor 2, data 2 x sharded 2, ... tie;
  // the most data replicas first, then the least sharding, then the fewest micro-batches.
  ASSERT_GE(a.ranked.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(to_string(a.ranked[static_cast<size_t>(i)].layout),
              "data 4 x sharded 1 x tensor 1 x pipeline 1, m " + std::to_string(1 << i) + ", v 1, ckpt off");
  }
  EXPECT_EQ(a.ranked[3].step_s, a.ranked[0].step_s);
  EXPECT_EQ(to_string(a.ranked[3].layout), "data 2 x sharded 1 x tensor 2 x pipeline 1, m 1, v 1, ckpt off");
  EXPECT_EQ(describe(a), describe(b));
}

TEST(LayoutSearch, FitsNowhereNamesTheSmallestMemory) {
  const int64_t gb = 1000000000;
  const ModelCost m = model(gb, 1000);
  const CommTable t = table(1e10, 1e10, 1e10);
  int64_t smallest = std::numeric_limits<int64_t>::max();
  for (const Prediction& p : search(m, t, options(int64_t{1} << 50)).ranked)
    smallest = std::min(smallest, p.memory_bytes);
  ASSERT_GT(smallest, gb);
  try {
    search(m, t, options(gb));
    FAIL() << "expected no layout to fit 1 GB";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("memory_limit: no layout fits 1.0 GB per rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the smallest needs " + format_bytes(smallest)), std::string::npos) << msg;
  }
}

TEST(LayoutSearch, KnownMemory) {
  const int64_t gb = 1000000000;
  const ModelCost m = model(gb, 1000);
  const CommTable t = table(1e10, 1e10, 1e10);
  SearchOptions o = options(int64_t{1} << 50);
  Layout l;
  l.data = 4;
  Prediction p = evaluate(m, t, o, l);
  EXPECT_EQ(p.state_bytes, 32 * gb);
  EXPECT_EQ(p.activation_bytes, 8 * 4 * 1000);  // 4 samples x 8 layers x 1000 B
  l.data = 1, l.sharded = 4;
  p = evaluate(m, t, o, l);
  EXPECT_EQ(p.state_bytes, 8 * gb + 2 * gb);  // a quarter, and two gathered layers
  l.sharded = 1, l.pipeline = 4, l.microbatches = 4;
  p = evaluate(m, t, o, l);
  EXPECT_EQ(p.state_bytes, 8 * gb);             // two layers per stage
  EXPECT_EQ(p.max_in_flight, 4);                    // 1F1B: stage 0 holds p micro-batches
  EXPECT_EQ(p.activation_bytes, 4 * 2 * 4 * 1000);  // 4 in flight x 2 layers x 4 samples
  EXPECT_NEAR(p.bubble, 3.0 / 7.0, 1e-5);           // (p-1)/(m+p-1), p2p nearly free
  l.checkpointing = true;
  p = evaluate(m, t, o, l);
  // Stage 1 (3 in flight) keeps its 2 layers' inputs (4 samples x 1000 B each) per
  // micro-batch, plus one layer recomputed; stage 0 (4 in flight) has one input to keep.
  EXPECT_EQ(p.max_in_flight, 3);
  EXPECT_EQ(p.activation_bytes, 3 * 8000 + 4000);
  l.pipeline = 1, l.data = 4, l.microbatches = 1;  // no pipeline: the layers' inputs + one layer
  p = evaluate(m, t, o, l);
  EXPECT_EQ(p.activation_bytes, 7 * 4000 + 4000);
  l.microbatches = 3;
  EXPECT_THROW(evaluate(m, t, o, l), InvalidArgument);
}

TEST(LayoutSearch, ContentionOptimizerTransientAndShardedLatency) {
  ModelCost m = model(1000, 1000);
  const CommTable free = table(kInf, kInf, kInf);
  SearchOptions o = options(int64_t{1} << 50);
  Layout ddp;
  ddp.data = 4;
  Layout pipe;
  pipe.pipeline = 4, pipe.microbatches = 4;
  const Prediction d0 = evaluate(m, free, o, ddp), p0 = evaluate(m, free, o, pipe);
  // 4 ranks on 2 cores: every rank busy doubles the compute; the pipeline's idle share
  // frees cores, so it is scaled by 4 x (1 - bubble) / 2 only (at least 1).
  o.host_cores = 2, o.host_threads = 4;
  EXPECT_NEAR(evaluate(m, free, o, ddp).compute_s, 2 * d0.compute_s, 1e-12);
  EXPECT_NEAR(evaluate(m, free, o, pipe).compute_s, p0.compute_s * std::max(1.0, 4 * (1 - p0.bubble) / 2), 1e-12);
  o.host_load = 2;  // the host's other load counts too
  EXPECT_NEAR(evaluate(m, free, o, ddp).compute_s, 3 * d0.compute_s, 1e-12);
  o.host_cores = 0, o.host_load = 0;
  // The optimizer: a rank's share of the parameters (the whole model; a quarter sharded over
  // 4; a stage's 2 of 8 layers).
  m.optimizer_s = 0.1;
  EXPECT_NEAR(evaluate(m, free, o, ddp).compute_s, d0.compute_s + 0.1, 1e-12);
  EXPECT_NEAR(evaluate(m, free, o, pipe).compute_s, p0.compute_s + 0.025, 1e-12);
  Layout sharded;
  sharded.sharded = 4;
  const double s0 = evaluate(m, free, o, sharded).compute_s;
  m.optimizer_s = 0;
  EXPECT_NEAR(s0 - evaluate(m, free, o, sharded).compute_s, 0.025, 1e-12);
  // Transient bytes: once, on the last stage, scaled to the micro-batch (4 samples).
  m.transient_bytes = 500;
  EXPECT_EQ(evaluate(m, free, o, ddp).activation_bytes, d0.activation_bytes + 4 * 500);
  // Sharded: the full gradients before their reduce-scatters, when the model says so.
  const int64_t state = evaluate(m, free, o, sharded).state_bytes;
  m.sharded_gradient_copies = 1;
  EXPECT_EQ(evaluate(m, free, o, sharded).state_bytes, state + 8 * 1000);
  // Sharded: each of the 8 layers gathers on its own: 8 latencies a gather, not 1.
  CommTable slow = free;
  for (CollectiveCost& e : slow.entries) e.alpha_s = 1e-3;
  const Prediction p = evaluate(m, slow, o, sharded);
  // 2 gathers (forward, backward) x 8 layers + a reduce-scatter of each of 8 layers; no
  // replicas to all-reduce over.
  EXPECT_NEAR(p.gradient_comm_s, 2 * 8 * 1e-3 + 8 * 1e-3, 1e-9);
}

// Regression (bench/auto_layout.sh, the vocabulary-head GPT: every layout's peak RSS 7-37%
// above its prediction): a large embedding/head tensor's fresh gradient in the backward, the
// gradient norm's and optimizer's copies of it after the backward, the allocator's retained
// transient, and world rank 0's profile (its peak, and what it keeps).
TEST(LayoutSearch, LargestTensorTransientsAndTheProfile) {
  ModelCost m = model(1000, 1000);
  m.layers.back().param_bytes = 8000;  // the head: one 6000-byte matrix and the rest
  m.largest_tensor_bytes.assign(8, 400);
  m.largest_tensor_bytes.back() = 6000;
  m.fixed_bytes = 100000;
  m.transient_bytes = 500;
  const CommTable free = table(kInf, kInf, kInf);
  const SearchOptions o = options(int64_t{1} << 50);
  Layout ddp;
  ddp.data = 4;  // 4 samples a replica
  const Prediction base = evaluate(m, free, o, ddp);
  EXPECT_EQ(base.step_bytes, 0);
  EXPECT_EQ(base.memory_bytes, base.state_bytes + base.activation_bytes + 100000);
  // The backward: one fresh gradient of the 6000-byte tensor; the retained transient doubles it.
  m.backward_tensor_copies = 1;
  m.transient_retention = 1;
  const Prediction backward = evaluate(m, free, o, ddp);
  EXPECT_EQ(backward.activation_bytes, base.activation_bytes + 6000 + 4 * 500);
  EXPECT_EQ(backward.memory_bytes, base.memory_bytes + 6000 + 4 * 500);
  // After the backward: the norm's and optimizer's copies, beside the backward's (the
  // allocator keeps the backward's freed blocks).
  m.step_tensor_copies = 4;
  const Prediction step = evaluate(m, free, o, ddp);
  EXPECT_EQ(step.step_bytes, 4 * 6000);
  EXPECT_EQ(step.memory_bytes, backward.memory_bytes + 4 * 6000);
  // Tensor parallel splits the tensor; sharded, the copies are of the largest layer's shard.
  Layout tensor;
  tensor.data = 2, tensor.tensor = 2;
  EXPECT_EQ(evaluate(m, free, o, tensor).step_bytes, 4 * 3000);
  Layout sharded;
  sharded.sharded = 4;
  EXPECT_EQ(evaluate(m, free, o, sharded).step_bytes, 4 * 8000 / 4);
  // Rank 0's profile: what it keeps is added; its peak is a floor.
  m.profile_residue_bytes = 7000;
  EXPECT_EQ(evaluate(m, free, o, ddp).memory_bytes, step.memory_bytes + 7000);
  m.profile_peak_bytes = int64_t{1} << 40;
  EXPECT_EQ(evaluate(m, free, o, ddp).memory_bytes, int64_t{1} << 40);
  // A run's own bytes on every layout; the replicas' gradient groups' only with data x sharded > 1.
  m.profile_peak_bytes = 0;
  m.run_bytes = 300, m.replica_group_bytes = 5000;
  EXPECT_EQ(evaluate(m, free, o, ddp).memory_bytes, step.memory_bytes + 7000 + 300 + 5000);
  Layout pipe;
  pipe.pipeline = 4;
  const int64_t piped = evaluate(m, free, o, pipe).memory_bytes;
  m.run_bytes = 0, m.replica_group_bytes = 0;
  EXPECT_EQ(evaluate(m, free, o, pipe).memory_bytes, piped - 300);
  m.profile_peak_bytes = int64_t{1} << 40;
  // A search under a limit below the profile's peak fits nowhere.
  EXPECT_THROW(search(m, free, options(int64_t{1} << 39)), InvalidArgument);
  m.largest_tensor_bytes.pop_back();
  EXPECT_THROW(evaluate(m, free, o, ddp), InvalidArgument);
}

TEST(LayoutSearch, CommTableLookup) {
  CommTable t;
  t.entries.push_back({Collective::kAllReduce, 2, 1e-3, 1e6});
  t.entries.push_back({Collective::kAllReduce, 8, 2e-3, 1e6});
  EXPECT_EQ(t.seconds(Collective::kAllReduce, 1, 1000000), 0);
  EXPECT_NEAR(t.seconds(Collective::kAllReduce, 2, 1000000), 1.001, 1e-12);
  EXPECT_NEAR(t.seconds(Collective::kAllReduce, 4, 1000000), 1.002, 1e-12);   // the next above
  EXPECT_NEAR(t.seconds(Collective::kAllReduce, 16, 1000000), 1.002, 1e-12);  // the largest below
  EXPECT_THROW(t.seconds(Collective::kP2P, 2, 10), InvalidArgument);
}

}  // namespace
}  // namespace heft::parallel::layout
