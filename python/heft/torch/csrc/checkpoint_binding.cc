// heft.torch's checkpoint directory: pybind11 functions over heft::parallel::CheckpointDirectory
// (src/heft/parallel/checkpoint_dir.h), so that heft.torch.parallel.save_checkpoint and
// load_checkpoint write and read heft's multi-writer format with the C++ code heft-train
// uses. Bytes in (a part's files), paths out (a verified checkpoint's files: the reader loads
// them one at a time). heft::InvalidArgument raises ValueError, heft::IoError OSError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include "bindings.h"
#include "heft/error.h"
#include "heft/parallel/checkpoint_dir.h"

namespace heft::torch_backend {

namespace py = pybind11;
using heft::parallel::CheckpointDirectory;

void bind_checkpoint(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "checkpoint", "heft's multi-writer checkpoint directory (src/heft/parallel/checkpoint_dir.h)");
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const heft::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const heft::IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });
  m.def(
      "save_part",
      [](const std::string& dir, int64_t step, int part,
         const std::map<std::string, std::string>& files) {
        CheckpointDirectory(dir, 1).save_part(step, part, files);
      },
      py::arg("dir"), py::arg("step"), py::arg("part"), py::arg("files"),
      py::call_guard<py::gil_scoped_release>(),
      "writes part `part` of checkpoint `step` (files: name -> bytes); not visible until commit");
  m.def(
      "commit",
      [](const std::string& dir, int64_t step, int parts, const std::string& meta_json,
         int keep) { CheckpointDirectory(dir, keep).commit(step, parts, meta_json); },
      py::arg("dir"), py::arg("step"), py::arg("parts"), py::arg("meta_json"), py::arg("keep"),
      py::call_guard<py::gil_scoped_release>(),
      "makes checkpoint `step` of `parts` parts visible atomically; keeps the `keep` newest");
  m.def(
      "steps", [](const std::string& dir) { return CheckpointDirectory(dir, 1).steps(); },
      py::arg("dir"), "steps of the ckpt-* directories, newest first (none verified)");
  m.def(
      "locate_latest",
      [](const std::string& dir) {
        std::ostringstream warnings;
        std::optional<heft::parallel::CheckpointPaths> found;
        {
          py::gil_scoped_release release;
          found = CheckpointDirectory(dir, 1).locate_latest_parts(warnings);
        }
        py::object result = py::none();
        if (found) result = py::make_tuple(found->step, found->meta_json, found->parts);
        return py::make_tuple(result, warnings.str());
      },
      py::arg("dir"),
      "((step, meta_json, [part K's {name: path}]) or None, warnings text): the newest "
      "committed multi-writer checkpoint whose every file matches its size and crc32");
}

}  // namespace heft::torch_backend
