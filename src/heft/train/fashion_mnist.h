// Fashion-MNIST: the IDX gzip files (Zalando's and MNIST's format) read into tensors, and
// the normalisation every heft model expects.
//
// IDX, byte by byte (all integers big-endian): 0x00 0x00, a type byte (0x08: unsigned
// bytes, the only type read here), the number of dimensions d, then d uint32 sizes, then the
// elements in row-major order. The files are gzip-compressed (zlib reads them).
//
// A data directory holds train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
// t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (Debian's dataset-fashion-mnist
// installs them in /usr/share/datasets/fashion-mnist). Every error throws heft::IoError
// (missing or unreadable file) or heft::InvalidArgument (malformed content) naming the file
// and what was expected and found.
// Deliberately left out: writing IDX (tests write their own), other element types.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace heft::train {

// Where heft looks when neither --data nor SM_CHANNEL_TRAIN says otherwise.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Mean and standard deviation of the training pixels (in [0, 1]).
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

// One IDX array of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> sizes;
  std::vector<uint8_t> data;  // product(sizes) bytes, row-major
};

// Reads a gzip-compressed (or plain: zlib reads both) IDX file of unsigned bytes.
IdxArray read_idx_gz(const std::string& path);

struct Dataset {
  torch::Tensor images;  // (N, 1, 28, 28) uint8
  torch::Tensor labels;  // (N,) int64, in 0..9
  int64_t size() const { return labels.size(0); }
};

// split: "train" or "t10k". Checks that images are (N, 28, 28), labels (N,) in 0..9.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split);

// images (B, 1, 28, 28) uint8 -> float, scaled to [0, 1], normalised by mean and std.
torch::Tensor normalize_images(const torch::Tensor& images);

// The rows `indices` of a data set: (normalised images (B,1,28,28) float, labels (B,)).
std::pair<torch::Tensor, torch::Tensor> gather_batch(const Dataset& data,
                                                     const std::vector<int64_t>& indices);

}  // namespace heft::train
