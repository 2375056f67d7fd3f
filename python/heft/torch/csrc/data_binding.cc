// _c10d.data (bindings.h): the text heft-train's GPT trains on and its batches
// (src/heft/parallel/data/text_windows.h), behind heft.torch.data.TextWindows, so a Python
// model sees the bytes heft-train's sees at every step.
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "heft/parallel/data/text_windows.h"

namespace heft::torch_backend {

namespace py = pybind11;
namespace data = parallel::data;

void bind_data(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "data", "heft-train's text corpus and batches (src/heft/parallel/data/text_windows.h)");
  m.attr("DEFAULT_TEXT_DIR") = data::kDefaultFortunesDir;
  m.def(
      "load_text",
      [](const std::string& dir, int64_t block_size) {
        data::TextCorpus c = value_errors([&] { return data::load_text_corpus(dir, block_size); });
        return py::make_tuple(c.train, c.held_out);
      },
      py::arg("dir"), py::arg("block_size"),
      "(train, held_out): the corpus's bytes as int64 tensors, split 90/10; OSError names "
      "the directory");
  m.def(
      "batch",
      [](const at::Tensor& train, int64_t block_size, int64_t batch_size, uint64_t seed,
         int64_t epoch, int64_t step, int rank, int ranks) {
        auto [x, y] = value_errors([&] {
          return data::text_batch(train, block_size, batch_size, seed, epoch, step, rank, ranks);
        });
        return py::make_tuple(x, y);
      },
      py::arg("train"), py::arg("block_size"), py::arg("batch_size"), py::arg("seed"),
      py::arg("epoch"), py::arg("step"), py::arg("rank"), py::arg("ranks"),
      "(inputs, targets) of rank's share of the global batch of (epoch, step)");
  m.def(
      "window_offsets",
      [](int64_t size, int64_t window, int64_t count, uint64_t seed) {
        return data::window_offsets(size, window, count, seed);
      },
      py::arg("size"), py::arg("window"), py::arg("count"), py::arg("seed"),
      "the offsets of `count` windows of `window` bytes in a text of `size` bytes");
}

}  // namespace heft::torch_backend
