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
// retained transient and rank 0's profile; the host terms measured at the start (inflation of the
// compute and of the step, synchronisation delays per point, overlap only on idle cores).
#include "heft/parallel/layout/layout_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
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
    // The smallest layout's largest component comes first: here the model's state.
    const std::regex parts(R"(largest parts first: (parameters|gradients|optimizer_state) [0-9.]+ [kMG]?B)");
    EXPECT_TRUE(std::regex_search(msg, parts)) << msg;
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
  // A rank that did not profile (every rank of a run given its layout) has neither.
  EXPECT_EQ(step.unprofiled_memory_bytes, step.memory_bytes);
  m.profile_residue_bytes = 7000;
  EXPECT_EQ(evaluate(m, free, o, ddp).memory_bytes, step.memory_bytes + 7000);
  EXPECT_EQ(evaluate(m, free, o, ddp).unprofiled_memory_bytes, step.memory_bytes);
  m.profile_peak_bytes = int64_t{1} << 40;
  EXPECT_EQ(evaluate(m, free, o, ddp).memory_bytes, int64_t{1} << 40);
  EXPECT_EQ(evaluate(m, free, o, ddp).unprofiled_memory_bytes, step.memory_bytes);
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

// The host terms measured at the start (host_probe.h; bench/auto_layout.sh: predictions 20-60%
// low on 4 ranks of 2 cores). Inflation scales the layers' compute and, apart, the step's
// (optimizer and gradient norm) before the contention.
TEST(LayoutSearchHostTerms, InflationScalesComputeAndStepApart) {
  ModelCost m = model(1000, 1000);
  m.optimizer_s = 0.1;
  const CommTable free = table(kInf, kInf, kInf);
  SearchOptions o = options(int64_t{1} << 50);
  Layout ddp;
  ddp.data = 4;
  const Prediction base = evaluate(m, free, o, ddp);  // 4 samples x 8 layers x 3 ms + 0.1
  ASSERT_NEAR(base.compute_s, 4 * 8 * 3e-3 + 0.1, 1e-12);
  o.host_compute_inflation = 1.25;
  EXPECT_NEAR(evaluate(m, free, o, ddp).compute_s, 1.25 * 4 * 8 * 3e-3 + 0.1, 1e-12);
  o.host_step_inflation = 2;
  EXPECT_NEAR(evaluate(m, free, o, ddp).compute_s, 1.25 * 4 * 8 * 3e-3 + 0.2, 1e-12);
  o.host_cores = 2, o.host_threads = 4;  // then the contention, on both
  EXPECT_NEAR(evaluate(m, free, o, ddp).compute_s, 2 * (1.25 * 4 * 8 * 3e-3 + 0.2), 1e-12);
  EXPECT_NEAR(evaluate(m, free, o, ddp).step_s, evaluate(m, free, o, ddp).compute_s, 1e-12);
}

TEST(LayoutSearchHostTerms, SyncDelayLookup) {
  const std::vector<SyncDelay> d = {{2, 1e-3}, {8, 3e-3}};
  EXPECT_EQ(sync_seconds(d, 1), 0);
  EXPECT_EQ(sync_seconds(d, 2), 1e-3);
  EXPECT_EQ(sync_seconds(d, 4), 3e-3);   // the next above
  EXPECT_EQ(sync_seconds(d, 16), 3e-3);  // the largest below
  EXPECT_EQ(sync_seconds({}, 4), 0);
}

// Each synchronisation point on the step's critical path waits sync_seconds of its group:
// tensor all-reduces per layer and micro-batch, a pipeline's p2p per micro-batch and its fill
// and drain, DDP's buckets, a sharded layer's gathers and reduce-scatter.
TEST(LayoutSearchHostTerms, SyncDelayPerSynchronisationPoint) {
  ModelCost m = model(1000, 1000);
  m.tensor_allreduces_per_layer = 4;
  const CommTable free = table(kInf, kInf, kInf);
  SearchOptions o = options(int64_t{1} << 50);
  Layout tensor;
  tensor.tensor = 4, tensor.microbatches = 2;
  Layout pipe;
  pipe.pipeline = 4, pipe.microbatches = 4;
  Layout ddp;
  ddp.data = 4;
  Layout sharded;
  sharded.sharded = 4, sharded.microbatches = 2;
  const Prediction t0 = evaluate(m, free, o, tensor), p0 = evaluate(m, free, o, pipe), d0 = evaluate(m, free, o, ddp),
                   s0 = evaluate(m, free, o, sharded);
  o.host_sync = {{2, 1e-3}, {4, 2e-3}};
  const Prediction t1 = evaluate(m, free, o, tensor);
  // 8 layers x 4 all-reduces x 2 micro-batches on groups of 4.
  EXPECT_NEAR(t1.step_s - t0.step_s, 8 * 4 * 2 * 2e-3, 1e-12);
  EXPECT_NEAR(t1.sync_s, 8 * 4 * 2 * 2e-3, 1e-12);
  EXPECT_NEAR(t1.tensor_comm_s - t0.tensor_comm_s, 8 * 4 * 2 * 2e-3, 1e-12);
  EXPECT_NEAR(t1.compute_s, t0.compute_s, 1e-12);  // wall seconds: not x the contention
  // A middle stage waits on 4 p2p a micro-batch (activation in and out, gradient in and
  // out) x 4, and the fill and drain cross 3 boundaries each way: pairs.
  EXPECT_NEAR(evaluate(m, free, o, pipe).step_s - p0.step_s, (4 * 4 + 2 * 3) * 1e-3, 1e-12);
  // DDP: one bucket (8000 bytes of gradients); more buckets, more waits.
  EXPECT_NEAR(evaluate(m, free, o, ddp).step_s - d0.step_s, 2e-3, 1e-12);
  o.first_bucket_bytes = 1000, o.bucket_bytes = 2000;  // 1000 + 4 x 2000 = 9000 >= 8000
  EXPECT_NEAR(evaluate(m, free, o, ddp).step_s - d0.step_s, 5 * 2e-3, 1e-12);
  // Sharded: 8 layers x (2 gathers x 2 micro-batches + a reduce-scatter) on groups of 4.
  const Prediction s1 = evaluate(m, free, o, sharded);
  EXPECT_NEAR(s1.gradient_comm_s - s0.gradient_comm_s, 8 * 5 * 2e-3, 1e-12);
  EXPECT_NEAR(s1.step_s - s0.step_s, 8 * 5 * 2e-3, 1e-12);
}

// With free communication and compute alone the most data-parallel layout wins (above);
// when synchronisation points cost, a layout with many (tensor 4: 32 a micro-batch) ranks
// below one with few, though the first computes less per rank.
TEST(LayoutSearchHostTerms, SyncDelayRanksManyPointsLower) {
  ModelCost m = model(1000, 1000);
  m.tensor_allreduces_per_layer = 4;
  m.optimizer_s = 0.2;  // a whole step on every replica: tensor 4 computes a quarter of it
  const CommTable free = table(kInf, kInf, kInf);
  SearchOptions o = options(int64_t{1} << 50);
  o.microbatches = {1}, o.checkpointing = {false};
  const auto first = [&] { return search(m, free, o).ranked.front().layout; };
  EXPECT_EQ(first().tensor, 4) << to_string(first());
  o.host_sync = {{4, 5e-3}};
  EXPECT_EQ(first().tensor, 1) << to_string(first());
}

// DDP's gradient all-reduce hides behind the backward only on cores the ranks leave idle.
TEST(LayoutSearchHostTerms, OverlapNeedsIdleCores) {
  ModelCost m = model(1000, 1000);
  CommTable slow = table(1e6, kInf, kInf);  // the all-reduce of 8000 bytes: 8 ms
  SearchOptions o = options(int64_t{1} << 50);
  o.overlap_gradients = true;
  o.host_cores = 4, o.host_threads = 2;  // half the cores idle
  Layout ddp;
  ddp.data = 4;
  const Prediction hidden = evaluate(m, slow, o, ddp);
  EXPECT_NEAR(hidden.step_s, hidden.compute_s, 1e-12);  // all hidden (a backward of 64 ms)
  o.overlap_needs_idle_cores = true;
  EXPECT_NEAR(evaluate(m, slow, o, ddp).step_s, hidden.compute_s + 0.5 * 8e-3, 1e-12);
  o.host_threads = 4;  // every core busy: none hides
  EXPECT_NEAR(evaluate(m, slow, o, ddp).step_s, evaluate(m, slow, o, ddp).compute_s + 8e-3, 1e-12);
}

}  // namespace
}  // namespace heft::parallel::layout

namespace heft::parallel::layout {
namespace {

// The memory by component (estimate_memory's breakdown) sums to the prediction exactly on
// every layout, and each component is the term it names: a DDP rank's parameters, gradients
// and AdamW state are the model's bytes x 1, 1, 2; sharded over 4 a quarter each and two
// gathered layers; the runtime and the profile's floor are what they were given.
TEST(LayoutSearch, MemoryPartsSumToThePredictionAndNameTheirTerms) {
  ModelCost m = model(1000, 1000);
  m.largest_tensor_bytes.assign(8, 400);
  m.fixed_bytes = 100000;
  m.transient_bytes = 500;
  m.backward_tensor_copies = 1;
  m.step_tensor_copies = 4;
  m.replica_gradient_copies = 1;
  m.sharded_gradient_copies = 1;
  const CommTable free = table(kInf, kInf, kInf);
  const SearchOptions o = options(int64_t{1} << 50);
  auto part = [](const Prediction& p, const std::string& name) {
    for (const MemoryPart& x : p.memory_parts)
      if (x.name == name) return x.bytes;
    ADD_FAILURE() << "no part " << name;
    return int64_t{-1};
  };
  const SearchResult all = search(m, free, o);
  for (const Prediction& p : all.ranked) {
    int64_t sum = 0;
    for (const MemoryPart& x : p.memory_parts) {
      EXPECT_GE(x.bytes, 0) << x.name << " of " << to_string(p.layout);
      sum += x.bytes;
    }
    EXPECT_EQ(sum, p.memory_bytes) << to_string(p.layout);
    EXPECT_EQ(part(p, "runtime"), 100000);
  }
  Layout ddp;
  ddp.data = 4;
  const Prediction d = evaluate(m, free, o, ddp);
  EXPECT_EQ(part(d, "parameters"), 8000);
  EXPECT_EQ(part(d, "gradients"), 8000);
  EXPECT_EQ(part(d, "optimizer_state"), 16000);
  EXPECT_EQ(part(d, "gradient_buffers"), 8000);  // DDP's bucket copy
  EXPECT_EQ(part(d, "gathered_parameters"), 0);
  EXPECT_EQ(part(d, "step_temporaries"), d.step_bytes);
  EXPECT_EQ(part(d, "profile_floor"), 0);
  Layout sharded;
  sharded.sharded = 4;
  const Prediction s = evaluate(m, free, o, sharded);
  EXPECT_EQ(part(s, "parameters"), 2000);
  EXPECT_EQ(part(s, "optimizer_state"), 4000);
  EXPECT_EQ(part(s, "gathered_parameters"), 2 * 1000);
  EXPECT_EQ(part(s, "gradient_buffers"), 8000);  // the full gradients before reduce-scatter
  // A measured step that held 1000 bytes more than the model counts for it (its saved
  // activations 8 x 1000, the gradients 8000 and AdamW's state 16000, the transient 500, one
  // 400-byte fresh gradient and the step's 4 copies of it): the slack, as a share of each
  // layout's activations (here the whole of them).
  EXPECT_EQ(part(d, "allocator_slack"), 0);
  m.step_peak_bytes = 8000 + 3 * 8000 + 500 + 5 * 400 + 1000;
  const Prediction slack = evaluate(m, free, o, ddp);
  EXPECT_EQ(part(slack, "allocator_slack"), part(d, "activations") * 1000 / 8000);
  EXPECT_EQ(slack.memory_bytes, d.memory_bytes + part(slack, "allocator_slack"));
  m.step_peak_bytes = 0;
  m.profile_peak_bytes = int64_t{1} << 40;
  const Prediction floor = evaluate(m, free, o, ddp);
  EXPECT_EQ(part(floor, "profile_floor"), (int64_t{1} << 40) - d.memory_bytes);
}

}  // namespace
}  // namespace heft::parallel::layout
