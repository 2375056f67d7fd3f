// heft-train's hyperparameters: --name value arguments, SM_HPS, their errors (as the
// heft-train binary prints them, exit 2), the warm-up schedule and the models' shapes.
#include "heft/train/hyperparameters.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>

#include "heft/error.h"
#include "heft/train/models.h"
#include "heft/train/optimizer.h"

namespace heft::train {
namespace {

// heft-train ARGS: its exit status and its output (stdout and stderr).
std::pair<int, std::string> heft_train(const std::string& args) {
  const std::string cmd = std::string(HEFT_BINARY_DIR) + "/heft-train " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {-1, "popen failed"};
  std::string out;
  std::array<char, 512> buf;
  while (fgets(buf.data(), buf.size(), f)) out += buf.data();
  const int status = pclose(f);
  return {WEXITSTATUS(status), out};
}

TEST(Hyperparameters, DefaultsArgumentsAndSmHps) {
  auto p = parse_hyperparameters({}, "");
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.value.model, "cnn");
  EXPECT_EQ(p.value.batch_size, 64);
  p = parse_hyperparameters(
      {"--model", "mlp", "--lr=0.25", "--scale_lr", "--eval", "off", "--epochs", "3"},
      R"({"lr": 0.5, "batch_size": "128", "warmup_steps": 10, "eval": true})");
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.value.model, "mlp");
  EXPECT_EQ(p.value.lr, 0.25);  // arguments override SM_HPS
  EXPECT_EQ(p.value.batch_size, 128);
  EXPECT_EQ(p.value.warmup_steps, 10);
  EXPECT_TRUE(p.value.scale_lr);
  EXPECT_FALSE(p.value.eval);
  EXPECT_EQ(p.value.epochs, 3);
}

TEST(Hyperparameters, ErrorsNameTheHyperparameter) {
  auto p = parse_hyperparameters({"--learning_rate", "0.1"}, "");
  EXPECT_EQ(p.error, "unknown hyperparameter 'learning_rate'; did you mean 'lr'?");
  EXPECT_EQ(p.error_name, "learning_rate");
  EXPECT_EQ(p.error_text, "unknown; did you mean 'lr'?");
  EXPECT_EQ(parse_hyperparameters({"--btach_size", "8"}, "").error,
            "unknown hyperparameter 'btach_size'; did you mean 'batch_size'?");
  EXPECT_EQ(parse_hyperparameters({"--lr", "fast"}, "").error,
            "hyperparameter lr: expected a number, found 'fast'");
  EXPECT_EQ(parse_hyperparameters({"--lr", "0"}, "").error,
            "hyperparameter lr: expected a number above 0, found 0");
  EXPECT_EQ(parse_hyperparameters({"--batch_size", "0"}, "").error,
            "hyperparameter batch_size: expected at least 1, found 0");
  EXPECT_EQ(parse_hyperparameters({"--optimizer", "adam"}, "").error,
            "hyperparameter optimizer: expected one of sgd, adamw, found 'adam'");
  EXPECT_EQ(parse_hyperparameters({"--epochs"}, "").error,
            "hyperparameter epochs: missing value (expected an integer)");
  EXPECT_EQ(parse_hyperparameters({"cnn"}, "").error,
            "unexpected argument 'cnn': expected --name value");
  EXPECT_EQ(parse_hyperparameters({}, R"({"momentum": "lots"})").error,
            "hyperparameter momentum (in SM_HPS): expected a number, found 'lots'");
  EXPECT_EQ(parse_hyperparameters({}, R"({"dropout": 0.1})")
                .error.rfind("unknown hyperparameter 'dropout' (in SM_HPS); known: ", 0),
            0u);
  EXPECT_EQ(parse_hyperparameters({}, "[1]").error, "SM_HPS must be a JSON object, found [1]");
}

TEST(Hyperparameters, HeftTrainExitsWith2NamingTheUnknownOne) {
  const auto [status, out] = heft_train("--epochs 1 --colour red");
  EXPECT_EQ(status, 2) << out;
  EXPECT_EQ(out.rfind("heft-train: unknown hyperparameter 'colour'; known: model, epochs,", 0), 0u)
      << out;
  EXPECT_NE(out.find("bf16_compression"), std::string::npos) << out;
}

TEST(Hyperparameters, DeviceIsCpuCudaOrCudaN) {
  EXPECT_EQ(parse_hyperparameters({}, "").value.device, "cpu");
  for (const char* d : {"cpu", "cuda", "cuda:0", "cuda:7"}) {
    const auto p = parse_hyperparameters({"--device", d}, "");
    ASSERT_TRUE(p.ok()) << d << ": " << p.error;
    EXPECT_EQ(p.value.device, d);
  }
  for (const char* d : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "mps"})
    EXPECT_EQ(parse_hyperparameters({"--device", d}, "").error,
              std::string("hyperparameter device: '") + d + "': expected cpu, cuda or cuda:N")
        << d;
}

// heft-train on a GPU needs LibTorch to see one: without, `device cuda` exits 2 naming why,
// before anything is built; with one, the GPU test (device_cuda_test.cc) runs instead.
TEST(Hyperparameters, DeviceCudaWithoutAGpuExits2NamingWhy) {
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  const auto [status, out] = heft_train("--model gpt --max_steps 1 --device cuda");
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("heft-train: device cuda: LibTorch sees no GPU (torch::cuda::device_count() "
                     "is 0); use device cpu"),
            std::string::npos)
      << out;
}

// The gradient clip's sum of squares: rows' norms in place, summed in double, within 3e-7 of
// the float64 sum (a row's float norm is rounded once, about 6e-8, and squared: 1.2e-7, plus
// the row's float accumulation; LibTorch 2.11's reduction order came to 1.08e-7 here) for a tensor with a tail past the rows, a small one, an empty one and a
// non-contiguous one; and the tensor is left as it was.
TEST(SquaredNorm, MatchesTheFloat64SumWithoutChangingTheGradient) {
  torch::manual_seed(0);
  const torch::Tensor big = torch::randn({1000, 37});  // 37000 = 9 rows of 4096 + 136
  for (const torch::Tensor& g : {big, torch::randn({5}), torch::zeros({0}), big.t()}) {
    const torch::Tensor before = g.clone();
    const double want = g.to(torch::kDouble).square().sum().item<double>();
    EXPECT_NEAR(squared_norm(g), want, 3e-7 * want + 1e-12) << g.sizes();
    EXPECT_TRUE(torch::equal(g, before));
  }
  EXPECT_EQ(squared_norm(torch::full({8192}, 2.0f)), 4.0 * 8192);
}

TEST(LearningRate, RisesLinearlyOverTheWarmUpThenStays) {
  OptimizerConfig c;
  c.lr = 0.4;
  c.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 0.2);
  EXPECT_DOUBLE_EQ(learning_rate(c, 3), 0.4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 100), 0.4);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.4);
}

TEST(LearningRate, CosineFallsFromThePeakToZeroAtTheLastStep) {
  OptimizerConfig c;
  c.lr = 0.4;
  c.warmup_steps = 4;
  c.schedule = "cosine";
  c.total_steps = 104;
  EXPECT_DOUBLE_EQ(learning_rate(c, 3), 0.4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 0.4);
  EXPECT_NEAR(learning_rate(c, 54), 0.2, 1e-12);
  EXPECT_NEAR(learning_rate(c, 104), 0.0, 1e-12);
  EXPECT_NEAR(learning_rate(c, 200), 0.0, 1e-12);
}

TEST(Models, MapImagesToTenLogits) {
  for (const std::string& name : model_names()) {
    if (find_model(name).task != "image") continue;
    auto m = make_model(name);
    EXPECT_EQ(m->forward(torch::zeros({3, 1, 28, 28})).sizes(), torch::IntArrayRef({3, 10}))
        << name;
  }
  auto cnn = make_model("cnn");
  int64_t n = 0;
  for (const auto& p : cnn->parameters()) n += p.numel();
  EXPECT_EQ(n, 32 * 25 + 32 + 64 * 32 * 25 + 64 + 1024 * 512 + 512 + 512 * 10 + 10);
  EXPECT_THROW(make_model("resnet"), InvalidArgument);
}

TEST(Models, GptMapsBytesToNextByteLogitsWithTheSeedsParameterCount) {
  ModelContext c;
  c.hp.n_layer = 2;
  c.hp.n_head = 2;
  c.hp.n_embd = 16;
  c.hp.block_size = 8;
  auto gpt = make_model("gpt", c);
  EXPECT_EQ(gpt->forward(torch::zeros({3, 8}, torch::kLong)).sizes(),
            torch::IntArrayRef({3, 8, 256}));
  EXPECT_EQ(gpt->units().size(), 2u);
  const int64_t d = 16;
  int64_t n = 0;
  for (const auto& p : gpt->parameters()) n += p.numel();
  // tok + pos + blocks (2 LayerNorms, qkv, proj, fc, out) + final LayerNorm + head.
  EXPECT_EQ(n, 256 * d + 8 * d + 2 * (4 * d + 3 * d * d + 3 * d + d * d + d + 4 * d * d + 4 * d +
                                      4 * d * d + d) +
                   2 * d + d * 256);
  EXPECT_THROW(gpt->forward(torch::zeros({1, 9}, torch::kLong)), InvalidArgument)
      << "a sequence longer than block_size";
}

}  // namespace
}  // namespace heft::train
