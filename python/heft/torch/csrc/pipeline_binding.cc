// _c10d.parallel.pipeline (bindings.h): heft's C++ pipeline schedules (schedule.h), simulator,
// partitioner (partition.h) and stage runtime (pipeline.h) for heft.torch.parallel.Pipeline.
// Nothing of a schedule or a partition is computed here or in Python: the action lists come
// from make_schedule and run_stage executes them, calling back into Python for each forward
// and, when asked (DDP), around each backward.
//
// The GIL: run_stage runs with the GIL released (its exchanges wait on the network, and the
// backward it runs is LibTorch's engine, which takes the GIL itself for Python hooks); each
// Python callback takes it back: forward for every forward action, around_backward (when
// given) for every backward; the received activations' shapes are a list given up front. A
// Python exception raised in a callback is kept (with the GIL) and raised again once
// run_stage has unwound; heft::PeerLost becomes PeerLost(message, peer) with the lost peer's
// rank in the pipeline group; heft::InvalidArgument becomes ValueError.
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "heft/error.h"
#include "heft/parallel/pipeline/partition.h"
#include "heft/parallel/pipeline/pipeline.h"
#include "heft/parallel/pipeline/schedule.h"
#include "parallel_group.h"

namespace heft::torch_backend {

namespace py = pybind11;
namespace pp = heft::parallel::pipeline;

namespace {

// Thrown through run_stage when a Python callback raised; the Python error waits in Callbacks.
struct CallbackFailed : std::runtime_error {
  CallbackFailed() : std::runtime_error("a Python callback of the pipeline stage raised") {}
};

struct Callbacks {
  std::optional<py::error_already_set> error;  // set and destroyed with the GIL held
  int64_t calls = 0;                           // into Python (each takes the GIL)
};

template <typename F>
auto invalid_as_value_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(e.what());
  }
}

torch::ScalarType dtype_of(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "float64") return torch::kDouble;
  if (name == "float16") return torch::kHalf;
  if (name == "bfloat16") return torch::kBFloat16;
  throw py::value_error("pipeline: activation dtype " + name +
                        ": expected float32, float64, float16 or bfloat16");
}

// (name, forward_s, backward_s, param_bytes, activation_bytes) rows <-> heft's LayerCost.
std::vector<pp::LayerCost> costs_of(const std::vector<py::tuple>& rows) {
  std::vector<pp::LayerCost> out;
  for (const py::tuple& r : rows) {
    if (r.size() != 5) throw py::value_error("pipeline: a layer cost is (name, forward_s, backward_s, param_bytes, activation_bytes)");
    out.push_back({r[0].cast<std::string>(), r[1].cast<double>(), r[2].cast<double>(),
                   r[3].cast<int64_t>(), r[4].cast<int64_t>()});
  }
  return out;
}

py::list rows_of(const std::vector<pp::LayerCost>& layers) {
  py::list out;
  for (const auto& l : layers)
    out.append(py::make_tuple(l.name, l.forward_s, l.backward_s, l.param_bytes, l.activation_bytes));
  return out;
}

// The partitioners' common conversion: rows in, `partition(layers)` run (InvalidArgument as
// ValueError), the plan out as a dict.
template <typename F>
py::dict partitioned(const std::vector<py::tuple>& rows, F&& partition) {
  const std::vector<pp::LayerCost> layers = costs_of(rows);
  const pp::Plan plan = invalid_as_value_error([&] { return partition(layers); });
  py::dict d;
  d["first"] = plan.first;
  d["max_cost"] = plan.max_cost;
  d["cut_bytes"] = plan.cut_bytes;
  d["cost"] = plan.cost;
  d["time_s"] = plan.time_s;
  d["memory"] = plan.memory;
  d["describe"] = pp::describe(plan, layers);
  return d;
}

const char* kind_name(pp::ActionKind k) {
  switch (k) {
    case pp::ActionKind::kForward: return "F";
    case pp::ActionKind::kBackward: return "B";
    case pp::ActionKind::kRecvActivation: return "rA";
    case pp::ActionKind::kSendActivation: return "sA";
    case pp::ActionKind::kRecvGradient: return "rG";
    case pp::ActionKind::kSendGradient: return "sG";
  }
  return "?";
}

// The schedule without its backward: the forwards and their activation exchanges (evaluate).
pp::Schedule forward_only(pp::Schedule sc) {
  for (auto& acts : sc.actions) {
    std::vector<pp::Action> kept;
    for (const pp::Action& a : acts)
      if (a.kind == pp::ActionKind::kForward || a.kind == pp::ActionKind::kRecvActivation ||
          a.kind == pp::ActionKind::kSendActivation)
        kept.push_back(a);
    acts = std::move(kept);
  }
  return sc;
}

py::dict counters_dict(const pp::PipelineCounters& c) {
  py::dict d;
  d["exchanges"] = c.exchanges;
  d["sends"] = c.sends;
  d["recvs"] = c.recvs;
  d["busy_seconds"] = c.busy_seconds;
  d["forward_seconds"] = c.forward_seconds;
  d["step_seconds"] = c.step_seconds;
  d["max_in_flight"] = c.max_in_flight;
  d["microbatch_seconds"] = c.microbatch_seconds;
  return d;
}

// The stage's functions over the Python callbacks. Only forward calls into Python for
// every action; the received activations' shapes are given up front (in the order of the
// stage's receives) and, without around_backward, a backward never takes the GIL.
pp::StageFunctions stage_functions(const py::function& forward, const py::object& around_backward,
                                   std::vector<std::vector<int64_t>> shapes,
                                   const std::string& dtype, std::shared_ptr<Callbacks> callbacks) {
  auto guarded = [callbacks](auto&& body) {
    py::gil_scoped_acquire gil;
    ++callbacks->calls;
    try {
      return body();
    } catch (py::error_already_set& e) {
      callbacks->error.emplace(std::move(e));
      throw CallbackFailed();
    }
  };
  pp::StageFunctions stage;
  stage.dtype = dtype_of(dtype);
  stage.forward = [guarded, &forward](int chunk, int m, const torch::Tensor& input) {
    return guarded([&] {
      py::object in = input.defined() ? py::cast(input) : py::none();
      return forward(chunk, m, in).cast<torch::Tensor>();
    });
  };
  auto next = std::make_shared<size_t>(0);
  stage.activation_shape = [shapes = std::move(shapes), next](int) {
    if (*next >= shapes.size())
      throw heft::InvalidArgument("pipeline: activation_shapes gives " + std::to_string(shapes.size()) +
                                  " shapes; the stage receives more activations than that");
    return shapes[(*next)++];
  };
  if (!around_backward.is_none())
    stage.around_backward = [guarded, &around_backward](int m, bool last, const std::function<void()>& body) {
      guarded([&] {
        py::cpp_function run_it([&body] {
          py::gil_scoped_release nogil;
          body();
        });
        around_backward(m, last, run_it);
        return 0;
      });
    };
  return stage;
}

py::dict run(const pp::Schedule& sc, ParallelGroup& group, const pp::StageFunctions& stage,
             Callbacks& callbacks, const py::object& peer_lost) {
  pp::PipelineCounters counters;
  std::optional<heft::PeerLost> lost;
  try {
    py::gil_scoped_release nogil;
    try {
      pp::run_stage(sc, group.tensors(), stage, &counters);
    } catch (const heft::PeerLost& e) {
      lost.emplace(e);
    }
  } catch (const CallbackFailed&) {
    if (callbacks.error) {
      callbacks.error->restore();
      callbacks.error.reset();
      throw py::error_already_set();
    }
    throw;
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(e.what());
  }
  if (lost) {
    PyErr_SetObject(peer_lost.ptr(), py::make_tuple(lost->what(), lost->peer()).ptr());
    throw py::error_already_set();
  }
  py::dict d = counters_dict(counters);
  d["python_calls"] = callbacks.calls;
  return d;
}

}  // namespace

void bind_pipeline(py::module_& parallel) {
  py::module_ m = parallel.def_submodule("pipeline", "see bindings.h");
  py::object peer_lost = py::exception<heft::PeerLost>(m, "PeerLost", PyExc_RuntimeError);

  py::class_<pp::Schedule>(m, "Schedule")
      .def_readonly("kind", &pp::Schedule::kind)
      .def_readonly("stages", &pp::Schedule::stages)
      .def_readonly("microbatches", &pp::Schedule::microbatches)
      .def_readonly("active", &pp::Schedule::active)
      .def_readonly("virtual_stages", &pp::Schedule::virtual_stages)
      .def("actions", [](const pp::Schedule& sc, int stage) {
             if (stage < 0 || stage >= sc.stages) throw py::index_error("pipeline: stage out of range");
             py::list out;
             for (const pp::Action& a : sc.actions[static_cast<size_t>(stage)])
               out.append(py::make_tuple(kind_name(a.kind), a.microbatch, a.peer, a.chunk,
                                         a.peer_chunk, pp::to_string(a)));
             return out;
           },
           py::arg("stage"), "stage's actions in order: (kind, microbatch, peer, chunk, peer_chunk, text)")
      .def("forward_only", &forward_only, "the forwards and their activation exchanges only");

  m.def("make_schedule", [](const std::string& kind, int stages, int microbatches, int active,
                            int virtual_stages) {
          return invalid_as_value_error(
              [&] { return pp::make_schedule(kind, stages, microbatches, active, virtual_stages); });
        },
        py::arg("kind"), py::arg("stages"), py::arg("microbatches"), py::arg("active") = 0,
        py::arg("virtual_stages") = 1);
  m.def("simulate", [](const pp::Schedule& sc, std::vector<double> fc, std::vector<double> bc) {
          pp::Simulation s = invalid_as_value_error([&] { return pp::simulate(sc, fc, bc); });
          py::dict d;
          d["ok"] = s.ok;
          d["error"] = s.error;
          d["makespan"] = s.makespan;
          d["bubble"] = s.bubble;
          d["max_in_flight"] = s.max_in_flight;
          d["grid"] = s.grid;
          d["render"] = pp::render(sc, s);
          return d;
        },
        py::arg("schedule"), py::arg("forward_cost") = std::vector<double>{},
        py::arg("backward_cost") = std::vector<double>{});
  m.def("theoretical_bubble", &pp::theoretical_bubble, py::arg("stages"), py::arg("microbatches"),
        py::arg("virtual_stages") = 1);
  m.def("auto_partition", [](const std::vector<py::tuple>& rows, int stages, double memory_weight,
                             double tolerance) {
          return partitioned(rows, [&](const auto& layers) {
            return pp::auto_partition(layers, stages, memory_weight, tolerance);
          });
        },
        py::arg("layers"), py::arg("stages"), py::arg("memory_weight"), py::arg("tolerance") = 0.0);
  m.def("manual_partition", [](const std::vector<py::tuple>& rows, const std::vector<int>& boundaries,
                               double memory_weight) {
          return partitioned(rows, [&](const auto& layers) {
            return pp::manual_partition(layers, boundaries, memory_weight);
          });
        },
        py::arg("layers"), py::arg("boundaries"), py::arg("memory_weight"));
  m.def("profile_layers", [](const std::vector<py::tuple>& rows, int warmup, int repeats,
                             const py::function& time_layer) {
          auto layers = costs_of(rows);
          invalid_as_value_error([&] {
            pp::profile_layers(layers, {warmup, repeats}, [&](int i, double* f, double* b) {
              std::tie(*f, *b) = time_layer(i).cast<std::pair<double, double>>();
            });
            return 0;
          });
          return rows_of(layers);
        },
        py::arg("layers"), py::arg("warmup"), py::arg("repeats"), py::arg("time_layer"),
        "each layer's median forward and backward seconds (time_layer(i) -> (forward_s, backward_s))");
  m.def("run_stage",
        [peer_lost](const pp::Schedule& sc, ParallelGroup& group, const py::function& forward,
                    const py::object& around_backward,
                    std::vector<std::vector<int64_t>> activation_shapes, const std::string& dtype) {
          auto callbacks = std::make_shared<Callbacks>();
          const pp::StageFunctions stage = stage_functions(
              forward, around_backward, std::move(activation_shapes), dtype, callbacks);
          return run(sc, group, stage, *callbacks, peer_lost);
        },
        py::arg("schedule"), py::arg("group"), py::arg("forward"), py::arg("around_backward"),
        py::arg("activation_shapes"), py::arg("dtype") = "float32",
        "runs this rank's stage of schedule over group (forward(chunk, m, input) -> tensor; "
        "around_backward(m, last, run) or None; activation_shapes: the shape of each activation "
        "the stage receives, in the order of its receives); returns its PipelineCounters as a dict "
        "with python_calls, the callbacks made into Python");
}

}  // namespace heft::torch_backend
