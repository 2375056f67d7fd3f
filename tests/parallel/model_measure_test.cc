// ctest-labels: unit
// The one model measurement (parallel/layout/model_measure.h) that heft-train's auto layout and
// heft.torch.parallel.auto_layout both run: a model of known layers gives its parameter,
// output and largest-tensor bytes exactly, saved bytes at least what autograd must keep,
// per-call parts within their bounds, one layer's gradients at a time, the head's transient
// bytes with and without a loss, the optimizer's probe shaped as the largest layer (capped),
// and errors naming the field.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "heft/error.h"
#include "heft/parallel/layout/model_measure.h"

namespace {

namespace pl = heft::parallel::layout;

// Linear layers in -> widths[0] -> widths[1] ..., each a weight and a bias.
struct Stack {
  std::vector<torch::nn::Linear> layers;
  std::vector<int> measured;  // the layers `measured` was called for, in order
  pl::MeasuredModel model() {
    pl::MeasuredModel m;
    m.layers = static_cast<int>(layers.size());
    m.forward = [this](int i, const torch::Tensor& x) { return layers[static_cast<size_t>(i)]->forward(x); };
    m.parameters = [this](int i) { return layers[static_cast<size_t>(i)]->parameters(); };
    m.measured = [this](int i) {
      // one layer's gradients at a time: none is left on the layers measured before
      for (int j = 0; j <= i; ++j)
        for (const torch::Tensor& p : layers[static_cast<size_t>(j)]->parameters()) EXPECT_FALSE(p.grad().defined());
      measured.push_back(i);
    };
    return m;
  }
};

Stack stack(int64_t in, const std::vector<int64_t>& widths) {
  torch::manual_seed(0);
  Stack s;
  for (int64_t w : widths) {
    s.layers.emplace_back(in, w);
    in = w;
  }
  return s;
}

pl::LayerMeasureOptions quick() {
  pl::LayerMeasureOptions o;
  o.profile = {0, 2};
  o.trim = false;
  return o;
}

TEST(ModelMeasure, KnownLayersGiveTheirBytesExactlyAndTheirSavedBytesAtLeastAutogradsInput) {
  Stack s = stack(64, {256, 32, 8});
  const torch::Tensor x = torch::randn({16, 64});
  const pl::LayerMeasurement m = pl::measure_layers(s.model(), x, 16, {}, 0, quick());
  ASSERT_EQ(m.costs.size(), 3u);
  const int64_t f = 4;
  EXPECT_EQ(m.costs[0].param_bytes, (64 * 256 + 256) * f);
  EXPECT_EQ(m.costs[1].param_bytes, (256 * 32 + 32) * f);
  EXPECT_EQ(m.costs[2].param_bytes, (32 * 8 + 8) * f);
  EXPECT_EQ(m.largest_tensor_bytes[0], 64 * 256 * f);
  EXPECT_EQ(m.costs[0].activation_bytes, 16 * 256 * f);
  EXPECT_EQ(m.costs[2].activation_bytes, 16 * 8 * f);
  EXPECT_EQ(m.shapes[1], (std::vector<std::vector<int64_t>>{{32, 256}, {32}}));
  // a Linear keeps its output until the backward (the output counts as saved)
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GE(m.saved_bytes[i], m.costs[i].activation_bytes) << "layer " << i;
    EXPECT_GT(m.costs[i].forward_s, 0) << "layer " << i;
    EXPECT_GT(m.costs[i].backward_s, 0) << "layer " << i;
    EXPECT_EQ(m.forward_fixed_s[i], 0) << "no larger batch: no per-call part";
  }
  EXPECT_EQ(s.measured, (std::vector<int>{0, 1}));  // never the head
  for (const torch::nn::Linear& l : s.layers)
    for (const torch::Tensor& p : l->parameters()) EXPECT_FALSE(p.grad().defined());
  // without a loss the head's transient bytes are its output's gradient
  EXPECT_EQ(m.transient_bytes, 16 * 8 * f);
  EXPECT_EQ(m.loss_s, 0);
}

TEST(ModelMeasure, TheLossCountsOnTheHeadAndThePerCallPartsStayWithinTheirTimes) {
  Stack s = stack(32, {512, 512, 1000});
  pl::MeasuredModel model = s.model();
  const torch::Tensor targets = torch::randint(0, 1000, {8}, torch::kLong);
  int losses = 0;
  model.loss = [&](const torch::Tensor& y) {
    ++losses;
    return torch::nn::functional::cross_entropy(y, targets);
  };
  const torch::Tensor x = torch::randn({8, 32});
  const pl::LayerMeasurement m = pl::measure_layers(model, x, 8, torch::cat({x, x}), 16, quick());
  EXPECT_EQ(losses, 2);  // twice: the second round's figures are kept
  EXPECT_GT(m.loss_s, 0);
  EXPECT_GE(m.costs[2].forward_s, m.loss_s);
  EXPECT_GE(m.transient_bytes, 0);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GE(m.forward_fixed_s[i], 0);
    EXPECT_LE(m.forward_fixed_s[i], m.costs[i].forward_s);
    EXPECT_GE(m.backward_fixed_s[i], 0);
    EXPECT_LE(m.backward_fixed_s[i], m.costs[i].backward_s);
  }
}

TEST(ModelMeasure, ALayerWorkingInPlaceLeavesTheBatchAsGiven) {
  pl::MeasuredModel model;
  model.layers = 2;
  torch::nn::Linear head(4, 2);
  model.forward = [&](int i, const torch::Tensor& x) { return i == 0 ? x.mul_(2) : head->forward(x); };
  model.parameters = [&](int i) { return i == 0 ? std::vector<torch::Tensor>{} : head->parameters(); };
  model.input_requires_grad = false;  // a leaf that needs no grad may be written in place
  const torch::Tensor x = torch::ones({3, 4});
  (void)pl::measure_layers(model, x, 3, {}, 0, quick());
  EXPECT_TRUE(torch::equal(x, torch::ones({3, 4})));
}

TEST(ModelMeasure, TheStepProbeIsShapedAsTheLargestLayerWithinItsCap) {
  pl::LayerMeasurement m;
  m.costs.resize(2);
  m.costs[0].param_bytes = 4 * (10 * 10 + 10);
  m.costs[1].param_bytes = 4 * (100 * 100 + 100);
  m.shapes = {{{10, 10}, {10}}, {{100, 100}, {100}}};
  int64_t probe = 0, all = 0;
  EXPECT_EQ(pl::step_probe_shapes(m, &probe, &all), (std::vector<std::vector<int64_t>>{{100, 100}, {100}}));
  EXPECT_EQ(probe, 4 * (100 * 100 + 100));
  EXPECT_EQ(all, m.costs[0].param_bytes + m.costs[1].param_bytes);
  // a first tensor over the cap: one flat tensor of the cap
  m.costs[1].param_bytes = 4 * (4096 * 1024);
  m.shapes[1] = {{4096, 1024}};
  EXPECT_EQ(pl::step_probe_shapes(m, &probe, &all), (std::vector<std::vector<int64_t>>{{pl::kStepProbeBytes / 4}}));
  EXPECT_EQ(probe, pl::kStepProbeBytes);

  int made = 0, steps = 0;
  m.shapes[1] = {{100, 100}, {100}};
  m.costs[1].param_bytes = 4 * (100 * 100 + 100);
  const double s = pl::measure_step(m, [&](std::vector<torch::Tensor>& params) {
    ++made;
    EXPECT_EQ(params.size(), 2u);
    EXPECT_EQ(params[0].sizes().vec(), (std::vector<int64_t>{100, 100}));
    EXPECT_EQ(params[0].scalar_type(), torch::kFloat);
    EXPECT_TRUE(params[0].requires_grad());
    EXPECT_TRUE(params[0].grad().defined());
    return std::function<void()>([&steps, &params] {
      ++steps;
      torch::NoGradGuard no_grad;
      for (torch::Tensor& p : params) p.add_(p.grad());
    });
  });
  EXPECT_EQ(made, 1);
  EXPECT_EQ(steps, 5);
  EXPECT_GT(s, 0);

  pl::LayerMeasurement none;  // no parameters: no step
  none.costs.resize(1);
  none.shapes.resize(1);
  EXPECT_EQ(pl::measure_step(none, [&](std::vector<torch::Tensor>&) {
              ++made;
              return std::function<void()>([] {});
            }),
            0);
  EXPECT_EQ(made, 1);
}

TEST(ModelMeasure, BadModelsAreNamed) {
  pl::MeasuredModel empty;
  try {
    (void)pl::measure_layers(empty, torch::ones({1}), 1, {}, 0);
    FAIL() << "no layers accepted";
  } catch (const heft::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layers: expected at least 1, found 0"), std::string::npos) << e.what();
  }
  pl::MeasuredModel no_forward;
  no_forward.layers = 1;
  try {
    (void)pl::measure_layers(no_forward, torch::ones({1}), 1, {}, 0);
    FAIL() << "no forward accepted";
  } catch (const heft::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("forward and parameters"), std::string::npos) << e.what();
  }
}

}  // namespace
