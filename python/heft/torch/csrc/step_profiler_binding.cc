// heft.torch's step profiler: pybind11 over heft::profile::StepProfiler
// (src/heft/step_profiler/step_profiler.h), so a Python training script's step lines are
// written by the C++ heft-train writes them with (heft.torch.profile is the Python face).
// Python opens a phase with push(name) and closes the innermost with pop() (a `with` block);
// a phase is named as phase_name() names it, and any other name raises ValueError listing
// them, enabled or not. One training thread, as the C++ profiler.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "heft/step_profiler/step_profiler.h"

namespace heft::torch_backend {

namespace {

namespace py = pybind11;
using profile::Phase;
using profile::StepProfiler;

Phase parse_phase(const std::string& name) {
  std::string names;
  for (int i = 0; i < profile::kPhases; ++i) {
    const Phase p = static_cast<Phase>(i);
    if (name == profile::phase_name(p)) return p;
    names += std::string(i ? ", " : "") + profile::phase_name(p);
  }
  throw py::value_error("heft.torch.profile: unknown phase '" + name + "' (expected one of " +
                        names + ")");
}

// A StepProfiler and its open phases, innermost last: the scopes a C++ caller would hold on
// its stack, held here across Python calls.
class PythonStepProfiler {
 public:
  explicit PythonStepProfiler(StepProfiler profiler) : profiler_(std::move(profiler)) {}
  PythonStepProfiler(const PythonStepProfiler&) = delete;
  PythonStepProfiler& operator=(const PythonStepProfiler&) = delete;

  bool enabled() const { return profiler_.enabled(); }
  void activate() { StepProfiler::activate(&profiler_); }
  void begin_step(int64_t step) {
    open_.clear();  // phases left open by the last step end with it
    profiler_.begin_step(step);
  }
  void push(const std::string& name) {
    const Phase p = parse_phase(name);
    if (enabled()) open_.push_back(std::make_unique<StepProfiler::Scope>(&profiler_, p));
  }
  void pop() {
    if (!open_.empty()) open_.pop_back();
  }
  void end_step() { profiler_.end_step(); }

 private:
  StepProfiler profiler_;
  std::vector<std::unique_ptr<StepProfiler::Scope>> open_;  // destroyed before profiler_
};

}  // namespace

void bind_step_profiler(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "step_profiler", "heft's step profiler (src/heft/step_profiler/step_profiler.h)");
  py::tuple names(profile::kPhases);
  for (int i = 0; i < profile::kPhases; ++i)
    names[static_cast<size_t>(i)] = profile::phase_name(static_cast<Phase>(i));
  m.attr("PHASES") = names;
  py::class_<PythonStepProfiler>(m, "StepProfiler")
      .def(py::init([](const std::string& path) {
             return std::make_unique<PythonStepProfiler>(StepProfiler(path));
           }),
           py::arg("path") = "", "appends to `path` (empty: disabled, every call a no-op)")
      .def_static(
          "from_env", [] { return std::make_unique<PythonStepProfiler>(StepProfiler::from_env()); },
          "$HEFT_PROFILE_DIR/rank-$RANK.steps, disabled without HEFT_PROFILE_DIR")
      .def_property_readonly("enabled", &PythonStepProfiler::enabled)
      .def("activate", &PythonStepProfiler::activate,
           "makes this the profiler C++ library code reports phases to")
      .def("begin_step", &PythonStepProfiler::begin_step, py::arg("step"))
      .def("push", &PythonStepProfiler::push, py::arg("name"), "opens phase `name`")
      .def("pop", &PythonStepProfiler::pop, "closes the innermost open phase")
      .def("end_step", &PythonStepProfiler::end_step,
           "ends the step begun last and writes its line");
}

}  // namespace heft::torch_backend
