// The IDX gzip loader: files written here with zlib, the errors for missing and malformed
// files (each names the file), and the real data set when it is installed.
#include "heft/train/fashion_mnist.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "heft/error.h"

namespace heft::train {
namespace {

namespace fs = std::filesystem;

class FashionMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/heft-idx-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes bytes gzip-compressed to dir_/name.
  std::string write_gz(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = dir_ + "/" + name;
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    gzclose(f);
    return path;
  }
  static std::vector<uint8_t> idx(std::vector<uint32_t> sizes, uint8_t fill, int64_t extra = 0) {
    std::vector<uint8_t> b{0, 0, 8, static_cast<uint8_t>(sizes.size())};
    int64_t total = 1;
    for (uint32_t d : sizes) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
      total *= d;
    }
    for (int64_t i = 0; i < total + extra; ++i) b.push_back(static_cast<uint8_t>(fill + i % 7));
    return b;
  }
  void write_split(const std::string& split, uint32_t n) {
    write_gz(split + "-images-idx3-ubyte.gz", idx({n, 28, 28}, 0));
    write_gz(split + "-labels-idx1-ubyte.gz", idx({n}, 0));
  }
  std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::string dir_;
};

TEST_F(FashionMnist, ReadsWhatWasWritten) {
  write_split("train", 5);
  Dataset d = load_fashion_mnist(dir_, "train");
  ASSERT_EQ(d.size(), 5);
  EXPECT_EQ(d.images.sizes(), torch::IntArrayRef({5, 1, 28, 28}));
  EXPECT_EQ(d.images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(d.images.flatten()[8].item<int>(), 1);  // fill + 8 % 7
  EXPECT_EQ(d.labels.scalar_type(), torch::kLong);
  EXPECT_EQ(d.labels[3].item<int64_t>(), 3);
  auto [x, y] = gather_batch(d, {4, 0});
  EXPECT_EQ(x.sizes(), torch::IntArrayRef({2, 1, 28, 28}));
  EXPECT_NEAR(x[1][0][0][0].item<double>(), (0.0 - kFashionMnistMean) / kFashionMnistStd, 1e-6);
  EXPECT_EQ(y[0].item<int64_t>(), 4);
}

TEST_F(FashionMnist, MissingFileIsAnIoErrorNamingIt) {
  const std::string e = error_of([&] { load_fashion_mnist(dir_, "t10k"); });
  EXPECT_EQ(
      e, "cannot open " + dir_ + "/t10k-images-idx3-ubyte.gz: No such file or directory (errno 2)");
}

TEST_F(FashionMnist, MalformedFilesAreNamedWithWhatWasWrong) {
  const std::string p = write_gz("bad.gz", {1, 2, 8, 1, 0, 0, 0, 1, 5});
  EXPECT_EQ(error_of([&] { read_idx_gz(p); }),
            p + ": not an IDX file: magic number starts with 1 2, expected 0 0");
  write_gz("short.gz", {0, 0});
  EXPECT_EQ(error_of([&] { read_idx_gz(dir_ + "/short.gz"); }),
            dir_ + "/short.gz: not an IDX file: shorter than its 4-byte magic number");
  auto truncated = idx({10, 28, 28}, 0, -100);
  const std::string t = write_gz("train-images-idx3-ubyte.gz", truncated);
  EXPECT_EQ(error_of([&] { read_idx_gz(t); }),
            t + ": truncated: the header promises 7840 bytes of data, the file holds 7740");
  write_gz("float.gz", {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  EXPECT_EQ(error_of([&] { read_idx_gz(dir_ + "/float.gz"); }),
            dir_ + "/float.gz: IDX element type 13 is not supported, expected 8 (unsigned byte)");
  // Not gzip and not IDX either: plain text.
  std::ofstream(dir_ + "/text.gz") << "hello, world\n";
  EXPECT_NE(error_of([&] { read_idx_gz(dir_ + "/text.gz"); }).find("not an IDX file"),
            std::string::npos);
}

TEST_F(FashionMnist, InconsistentFilesAreNamed) {
  write_gz("train-images-idx3-ubyte.gz", idx({4, 28, 28}, 0));
  write_gz("train-labels-idx1-ubyte.gz", idx({3}, 0));
  EXPECT_EQ(error_of([&] { load_fashion_mnist(dir_, "train"); }),
            dir_ + "/train-labels-idx1-ubyte.gz: 3 labels for 4 images in " + dir_ +
                "/train-images-idx3-ubyte.gz");
  write_gz("train-labels-idx1-ubyte.gz", idx({4}, 9));
  EXPECT_EQ(error_of([&] { load_fashion_mnist(dir_, "train"); }),
            dir_ + "/train-labels-idx1-ubyte.gz: label 10 at index 1, expected 0..9");
  write_gz("train-images-idx3-ubyte.gz", idx({4, 32, 32}, 0));
  EXPECT_EQ(error_of([&] { load_fashion_mnist(dir_, "train"); }),
            dir_ +
                "/train-images-idx3-ubyte.gz: expected images of shape (N, 28, 28), found "
                "[4, 32, 32]");
}

TEST(FashionMnistInstalled, TestSplitHas10000LabelledImages) {
  if (!fs::exists(std::string(kDefaultFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Dataset d = load_fashion_mnist(kDefaultFashionMnistDir, "t10k");
  EXPECT_EQ(d.size(), 10000);
  EXPECT_EQ(d.labels.bincount().min().item<int64_t>(), 1000);  // balanced classes
}

}  // namespace
}  // namespace heft::train
