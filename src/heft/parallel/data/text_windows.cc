#include "heft/parallel/data/text_windows.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "heft/error.h"

namespace heft::parallel::data {

namespace fs = std::filesystem;

TextCorpus load_text_corpus(const std::string& dir, int64_t block_size) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string ext = p.extension().string();
    if (ext == ".dat" || ext == ".u8" || it->is_symlink() || !it->is_regular_file()) continue;
    files.push_back(p);
  }
  if (ec) throw IoError("text data " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::string bytes;
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    if (!in) throw IoError("text data: cannot read " + p.string());
    bytes += os.str();
  }
  if (bytes.empty())
    throw IoError("text data " + dir +
                  ": no text files (expected plain files other than *.dat and *.u8; the "
                  "Debian package fortunes installs them in " +
                  std::string(kDefaultFortunesDir) + ")");
  const auto n = static_cast<int64_t>(bytes.size());
  const int64_t cut = n * 9 / 10;
  if (cut < block_size + 1 || n - cut < block_size + 1)
    throw InvalidArgument("text data " + dir + ": " + std::to_string(n) +
                          " bytes are too few for windows of block_size + 1 = " +
                          std::to_string(block_size + 1) + " bytes in both the training 90% "
                          "and the held-out 10%");
  torch::Tensor all = torch::empty({n}, torch::kUInt8);
  std::memcpy(all.data_ptr(), bytes.data(), bytes.size());
  all = all.to(torch::kLong);
  return {all.narrow(0, 0, cut).clone(), all.narrow(0, cut, n - cut).clone()};
}

std::vector<int64_t> window_offsets(int64_t size, int64_t window, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, size - window);
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t& o : out) o = pick(rng);
  return out;
}

uint64_t batch_seed(uint64_t seed, int64_t epoch, int64_t step) {
  // (seed, epoch, step) mixed into one seed (splitmix64's constants).
  uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch) << 32) ^
               static_cast<uint64_t>(step);
  s = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9ull;
  return s ^ (s >> 31);
}

std::pair<int64_t, int64_t> share(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& text,
                                                const std::vector<int64_t>& offsets,
                                                int64_t block) {
  std::vector<torch::Tensor> rows;
  rows.reserve(offsets.size());
  for (int64_t o : offsets) rows.push_back(text.narrow(0, o, block + 1));
  const torch::Tensor w = torch::stack(rows);  // (b, block + 1)
  return {w.narrow(1, 0, block).contiguous(), w.narrow(1, 1, block).contiguous()};
}

std::pair<torch::Tensor, torch::Tensor> text_batch(const torch::Tensor& train, int64_t block,
                                                   int64_t batch_size, uint64_t seed,
                                                   int64_t epoch, int64_t step, int rank,
                                                   int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks || batch_size < ranks)
    throw InvalidArgument("text batch: rank " + std::to_string(rank) + " of " +
                          std::to_string(ranks) + " ranks and batch_size " +
                          std::to_string(batch_size) + " (expected 0 <= rank < ranks <= batch_size)");
  const std::vector<int64_t> all =
      window_offsets(train.size(0), block + 1, batch_size, batch_seed(seed, epoch, step));
  const auto [begin, end] = share(batch_size, rank, ranks);
  return windows(train, {all.begin() + begin, all.begin() + end}, block);
}

}  // namespace heft::parallel::data
