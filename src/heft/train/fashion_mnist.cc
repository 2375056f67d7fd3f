#include "heft/train/fashion_mnist.h"

#include <zlib.h>

#include <cerrno>
#include <memory>

#include "heft/error.h"

namespace heft::train {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly n bytes or says how many there were.
size_t read_some(gzFile f, const std::string& path, uint8_t* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw InvalidArgument(path + ": not a readable gzip file (" + (msg ? msg : "?") + ")");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

IdxArray read_idx_gz(const std::string& path) {
  errno = 0;
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (!f) throw IoError("cannot open " + path + ": " + errno_string(errno ? errno : ENOENT));
  uint8_t head[4];
  if (read_some(f.get(), path, head, 4) != 4)
    throw InvalidArgument(path + ": not an IDX file: shorter than its 4-byte magic number");
  if (head[0] != 0 || head[1] != 0)
    throw InvalidArgument(path + ": not an IDX file: magic number starts with " +
                          std::to_string(head[0]) + " " + std::to_string(head[1]) +
                          ", expected 0 0");
  if (head[2] != 0x08)
    throw InvalidArgument(path + ": IDX element type " + std::to_string(head[2]) +
                          " is not supported, expected 8 (unsigned byte)");
  const int ndim = head[3];
  if (ndim < 1 || ndim > 4)
    throw InvalidArgument(path + ": IDX file with " + std::to_string(ndim) +
                          " dimensions, expected 1 to 4");
  IdxArray a;
  int64_t total = 1;
  for (int i = 0; i < ndim; ++i) {
    uint8_t b[4];
    if (read_some(f.get(), path, b, 4) != 4)
      throw InvalidArgument(path + ": IDX header truncated in the size of dimension " +
                            std::to_string(i));
    const int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    a.sizes.push_back(d);
    total *= d;
    if (total > (int64_t{1} << 34))
      throw InvalidArgument(path + ": IDX header claims more than 16 GiB of data");
  }
  a.data.resize(static_cast<size_t>(total));
  const size_t got = read_some(f.get(), path, a.data.data(), a.data.size());
  if (got != a.data.size())
    throw InvalidArgument(path + ": truncated: the header promises " + std::to_string(total) +
                          " bytes of data, the file holds " + std::to_string(got));
  uint8_t extra;
  if (read_some(f.get(), path, &extra, 1) != 0)
    throw InvalidArgument(path + ": more data than the header's " + std::to_string(total) +
                          " bytes");
  return a;
}

Dataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "t10k")
    throw InvalidArgument("load_fashion_mnist: split must be train or t10k, got '" + split + "'");
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  IdxArray images = read_idx_gz(images_path);
  IdxArray labels = read_idx_gz(labels_path);
  if (images.sizes.size() != 3 || images.sizes[1] != 28 || images.sizes[2] != 28)
    throw InvalidArgument(images_path + ": expected images of shape (N, 28, 28), found " +
                          c10::str(torch::IntArrayRef(images.sizes)));
  if (labels.sizes.size() != 1)
    throw InvalidArgument(labels_path + ": expected labels of shape (N), found " +
                          c10::str(torch::IntArrayRef(labels.sizes)));
  if (labels.sizes[0] != images.sizes[0])
    throw InvalidArgument(labels_path + ": " + std::to_string(labels.sizes[0]) + " labels for " +
                          std::to_string(images.sizes[0]) + " images in " + images_path);
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] > 9)
      throw InvalidArgument(labels_path + ": label " + std::to_string(labels.data[i]) +
                            " at index " + std::to_string(i) + ", expected 0..9");
  const int64_t n = images.sizes[0];
  Dataset d;
  d.images = torch::from_blob(images.data.data(), {n, 1, 28, 28}, torch::kUInt8).clone();
  d.labels = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kLong);
  return d;
}

torch::Tensor normalize_images(const torch::Tensor& images) {
  return images.to(torch::kFloat).mul_(1.0 / 255.0).sub_(kFashionMnistMean).div_(kFashionMnistStd);
}

std::pair<torch::Tensor, torch::Tensor> gather_batch(const Dataset& data,
                                                     const std::vector<int64_t>& indices) {
  torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(indices.data()),
                                       {static_cast<int64_t>(indices.size())}, torch::kLong);
  return {normalize_images(data.images.index_select(0, idx)), data.labels.index_select(0, idx)};
}

}  // namespace heft::train
