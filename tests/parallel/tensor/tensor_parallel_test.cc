// ctest-labels: multiproc
// The tensor-parallel layers alone, on 2 forked ranks, against the full LibTorch layer on
// random input: ColumnParallelLinear (gathered) and RowParallelLinear against
// torch::nn::Linear, VocabParallelEmbedding against torch::nn::Embedding, and the
// vocabulary-parallel cross-entropy against cross_entropy: outputs, input gradients and each
// rank's slice of the weight gradients. The split/join helpers invert each other, and a
// transformer block of the GPT communicates with two all-reduces forward and two backward.
#include "heft/parallel/tensor/tensor_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "heft/train/gpt.h"
#include "support/ranks.h"

namespace heft::parallel::tensor {
namespace {

using test::expect;

constexpr double kTolerance = 1e-5;

void close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  const double d = (a - b).abs().max().item<double>();
  expect(d <= kTolerance, what + " differs by " + std::to_string(d));
}

TEST(TensorParallel, LayersMatchTheFullLayersForwardAndBackward) {
  test::StoreProcess store;
  auto result = test::run_world(2, store, [](comm::Communicator& c) {
    torch::set_num_threads(1);
    ProcessGroup g(c);
    const int r = g.rank(), T = g.size();
    torch::manual_seed(11);  // the same full layers and inputs on every rank
    // Column, gathered.
    {
      torch::nn::Linear full(8, 6);
      torch::Tensor x = torch::randn({5, 8}, torch::requires_grad());
      torch::Tensor w = torch::randn({5, 6});
      (full(x) * w).sum().backward();
      ColumnParallelLinear col(8, 6, g, true, /*gather_output=*/true);
      col->load_full(full->weight, full->bias);
      torch::Tensor xt = x.detach().clone().requires_grad_(true);
      torch::Tensor y = col(xt);
      close(y, full(x), "column output");
      (y * w).sum().backward();
      close(xt.grad(), x.grad(), "column input grad");
      close(col->weight.grad(), full->weight.grad().narrow(0, r * 3, 3), "column weight grad");
      close(col->bias.grad(), full->bias.grad().narrow(0, r * 3, 3), "column bias grad");
    }
    // Row, input parallel.
    {
      torch::nn::Linear full(8, 6);
      torch::Tensor x = torch::randn({5, 8}, torch::requires_grad());
      torch::Tensor w = torch::randn({5, 6});
      (full(x) * w).sum().backward();
      RowParallelLinear row(8, 6, g);
      row->load_full(full->weight, full->bias);
      torch::Tensor xt = x.detach().narrow(1, r * 4, 4).clone().requires_grad_(true);
      torch::Tensor y = row(xt);
      close(y, full(x), "row output");
      (y * w).sum().backward();
      close(xt.grad(), x.grad().narrow(1, r * 4, 4), "row input grad");
      close(row->weight.grad(), full->weight.grad().narrow(1, r * 4, 4), "row weight grad");
      close(row->bias.grad(), full->bias.grad(), "row bias grad");
    }
    // Embedding.
    {
      torch::nn::Embedding full(16, 4);
      torch::Tensor ids = torch::randint(0, 16, {3, 7}, torch::kLong);
      torch::Tensor w = torch::randn({3, 7, 4});
      (full(ids) * w).sum().backward();
      VocabParallelEmbedding emb(16, 4, g);
      emb->load_full(full->weight);
      torch::Tensor y = emb(ids);
      close(y, full(ids), "embedding output");
      (y * w).sum().backward();
      close(emb->weight.grad(), full->weight.grad().narrow(0, r * 8, 8), "embedding weight grad");
    }
    // Cross-entropy over the vocabulary split.
    {
      torch::Tensor logits = torch::randn({9, 16}, torch::requires_grad());
      torch::Tensor targets = torch::randint(0, 16, {9}, torch::kLong);
      namespace F = torch::nn::functional;
      torch::Tensor ref = F::cross_entropy(logits, targets, F::CrossEntropyFuncOptions().reduction(torch::kSum));
      ref.backward();
      torch::Tensor mine = logits.detach().narrow(1, r * 8, 8).clone().requires_grad_(true);
      torch::Tensor loss = vocab_parallel_cross_entropy_sum(mine, targets, r * 8, g);
      close(loss, ref, "cross-entropy");
      loss.backward();
      close(mine.grad(), logits.grad().narrow(1, r * 8, 8), "cross-entropy logits grad");
    }
    // take_slice / join_slices, with a fused qkv's three blocks.
    {
      torch::Tensor full = torch::arange(24, torch::kFloat).view({12, 2});
      const Split qkv{0, 3};
      std::vector<torch::Tensor> slices;
      for (int k = 0; k < T; ++k) slices.push_back(take_slice(full, qkv, k, T, "qkv"));
      expect(torch::equal(slices[0].select(1, 0), torch::tensor({0.f, 2.f, 8.f, 10.f, 16.f, 18.f})),
             "rank 0 takes rows 0-1 of each of q, k, v");
      expect(torch::equal(join_slices(slices, qkv), full), "join inverts take");
    }
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

TEST(TensorParallel, AGptBlockAllReducesTwiceForwardAndTwiceBackward) {
  test::StoreProcess store;
  auto result = test::run_world(2, store, [](comm::Communicator& c) {
    torch::set_num_threads(1);
    ProcessGroup g(c);
    torch::manual_seed(3);
    train::GptConfig cfg;
    cfg.n_layer = 3;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.block_size = 8;
    train::TensorParallelGpt gpt(cfg, g);
    const torch::Tensor ids = torch::randint(0, 256, {2, 8}, torch::kLong);
    counters() = {};
    torch::Tensor logits = gpt.forward(ids);
    const TensorParallelCounters f = counters();
    gpt.loss_sum(logits, ids).backward();
    const TensorParallelCounters b = counters();
    // Forward: the embedding's all-reduce, 2 per block; the loss: 2 (max, sums).
    const std::string text = "forward " + std::to_string(f.forward_allreduces) + ", backward " +
                             std::to_string(b.backward_allreduces) + " all-reduces";
    expect(f.forward_allreduces == 1 + 2 * cfg.n_layer, text);
    expect(b.forward_allreduces == f.forward_allreduces + 2, text);
    // Backward: 2 per block (the gradients of the qkv and fc inputs), 1 for the head's input.
    expect(b.backward_allreduces == 2 * cfg.n_layer + 1, text);
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

}  // namespace
}  // namespace heft::parallel::tensor
