// _c10d.parallel.layout: heft's C++ layout search (src/heft/parallel/layout/layout_search.h)
// behind heft.torch.parallel.auto_layout (_auto_layout.py). Nothing is priced here: the rows
// and the model's measured terms (ModelCost's saved bytes, per-call times, optimizer step,
// transient and runtime bytes, largest tensors and their copies, the profile's peak and
// residue; SearchOptions' host contention) go to search() as they are (evaluate() prices one
// layout, for heft.torch.parallel.estimate_memory);
// measure_layers is the model measurement heft-train's profile runs (model_measure.h), over
// the user's layers given as Python callables; heap_in_use, resident_bytes and
// runnable_elsewhere are the host facts Python's side reads. heft::InvalidArgument becomes
// ValueError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "heft/error.h"
#include "heft/host/host.h"
#include "heft/parallel/layout/comm_measure.h"
#include "heft/parallel/layout/host_probe.h"
#include "heft/parallel/layout/layout_search.h"
#include "heft/parallel/layout/model_measure.h"
#include "heft/parallel/layout/optimizer_memory.h"
#include "parallel_group.h"

namespace heft::torch_backend {

namespace py = pybind11;
namespace pl = heft::parallel::layout;

namespace {

pl::Collective collective_of(const std::string& name) {
  if (name == "allreduce") return pl::Collective::kAllReduce;
  if (name == "reduce_scatter") return pl::Collective::kReduceScatter;
  if (name == "all_gather") return pl::Collective::kAllGather;
  if (name == "p2p") return pl::Collective::kP2P;
  throw py::value_error("auto_layout: comm collective " + name +
                        ": expected allreduce, reduce_scatter, all_gather or p2p");
}

py::dict layout_dict(const pl::Layout& l) {
  py::dict d;
  d["data"] = l.data, d["sharded"] = l.sharded, d["tensor"] = l.tensor, d["pipeline"] = l.pipeline;
  d["microbatches"] = l.microbatches, d["virtual_stages"] = l.virtual_stages;
  d["checkpointing"] = l.checkpointing;
  d["checkpoint_placement"] = l.checkpoint_placement;
  d["text"] = pl::to_string(l);
  return d;
}

py::dict prediction_dict(const pl::Prediction& p) {
  py::dict d;
  d["layout"] = layout_dict(p.layout);
  d["step_s"] = p.step_s, d["compute_s"] = p.compute_s, d["bubble"] = p.bubble;
  d["tensor_comm_s"] = p.tensor_comm_s, d["gradient_comm_s"] = p.gradient_comm_s;
  d["memory_bytes"] = p.memory_bytes, d["state_bytes"] = p.state_bytes;
  d["activation_bytes"] = p.activation_bytes, d["step_bytes"] = p.step_bytes;
  d["max_in_flight"] = p.max_in_flight;
  d["stage_first"] = p.stage_first;
  py::list parts;
  for (const pl::MemoryPart& x : p.memory_parts) parts.append(py::make_tuple(x.name, x.bytes));
  d["memory_parts"] = parts;
  return d;
}

// o[key] cast to T when the dict has it, else `otherwise`.
template <typename T>
T optional(const py::dict& o, const char* key, T otherwise) {
  return o.contains(key) ? o[key].cast<T>() : otherwise;
}

// Per layer, o[key] (n values) when given, else empty (the search's fallback).
template <typename T>
std::vector<T> per_layer(const py::dict& o, const char* key, size_t n) {
  std::vector<T> v = optional<std::vector<T>>(o, key, {});
  if (!v.empty() && v.size() != n)
    throw py::value_error(std::string("auto_layout: ") + key + ": expected " + std::to_string(n) +
                          " values (one a layer), found " + std::to_string(v.size()));
  return v;
}

// ModelCost from the rows and the options' model terms (layout_search.h names each).
pl::ModelCost model_cost(const std::vector<py::tuple>& rows, const py::dict& o) {
  pl::ModelCost model;
  for (const py::tuple& r : rows) {
    if (r.size() != 5) throw py::value_error("auto_layout: a layer cost is (name, forward_s, backward_s, param_bytes, activation_bytes)");
    model.layers.push_back({r[0].cast<std::string>(), r[1].cast<double>(), r[2].cast<double>(), r[3].cast<int64_t>(),
                            r[4].cast<int64_t>()});
  }
  model.profiled_batch = o["profiled_batch"].cast<int>();
  model.optimizer_bytes_per_param_byte = o["optimizer_bytes_per_param_byte"].cast<double>();
  model.saved_activation_factor = o["saved_activation_factor"].cast<double>();
  model.tensor_allreduces_per_layer = o["tensor_allreduces_per_layer"].cast<int>();
  model.heads = o["heads"].cast<int>();
  const size_t n = model.layers.size();
  model.saved_bytes = per_layer<int64_t>(o, "saved_bytes", n);
  model.forward_fixed_s = per_layer<double>(o, "forward_fixed_s", n);
  model.backward_fixed_s = per_layer<double>(o, "backward_fixed_s", n);
  model.fixed_bytes = optional<int64_t>(o, "fixed_bytes", 0);
  model.replica_gradient_copies = optional<double>(o, "replica_gradient_copies", 0);
  model.sharded_gradient_copies = optional<double>(o, "sharded_gradient_copies", 0);
  model.optimizer_s = optional<double>(o, "optimizer_s", 0);
  model.transient_bytes = optional<int64_t>(o, "transient_bytes", 0);
  model.transient_retention = optional<double>(o, "transient_retention", 0);
  model.largest_tensor_bytes = per_layer<int64_t>(o, "largest_tensor_bytes", n);
  model.backward_tensor_copies = optional<double>(o, "backward_tensor_copies", 0);
  model.step_tensor_copies = optional<double>(o, "step_tensor_copies", 0);
  model.profile_peak_bytes = optional<int64_t>(o, "profile_peak_bytes", 0);
  model.profile_residue_bytes = optional<int64_t>(o, "profile_residue_bytes", 0);
  model.run_bytes = optional<int64_t>(o, "run_bytes", 0);
  model.replica_group_bytes = optional<int64_t>(o, "replica_group_bytes", 0);
  model.step_peak_bytes = optional<int64_t>(o, "step_peak_bytes", 0);
  return model;
}

pl::CommTable comm_table(const std::vector<py::tuple>& comm) {
  pl::CommTable table;
  for (const py::tuple& c : comm) {
    if (c.size() != 4) throw py::value_error("auto_layout: a comm cost is (collective, group, alpha_s, beta_bytes_per_s)");
    table.entries.push_back({collective_of(c[0].cast<std::string>()), c[1].cast<int>(), c[2].cast<double>(),
                             c[3].cast<double>()});
  }
  return table;
}

pl::SearchOptions search_options(const py::dict& o) {
  pl::SearchOptions so;
  so.world = o["world"].cast<int>();
  so.memory_limit_bytes = o["memory_limit"].cast<int64_t>();
  so.global_batch = o["global_batch"].cast<int>();
  so.microbatches = o["microbatches"].cast<std::vector<int>>();
  so.virtual_stages = o["virtual_stages"].cast<std::vector<int>>();
  so.checkpointing = o["checkpointing"].cast<std::vector<bool>>();
  so.overlap_gradients = o["overlap_gradients"].cast<bool>();
  so.memory_weight = optional<double>(o, "memory_weight", so.memory_weight);
  so.host_cores = optional<double>(o, "host_cores", 0);
  so.host_threads = optional<double>(o, "host_threads", 0);
  so.host_load = optional<double>(o, "host_load", 0);
  so.tensor_splits = optional<int>(o, "tensor_splits", 0);
  so.host_compute_inflation = optional<double>(o, "host_compute_inflation", 1);
  so.host_step_inflation = optional<double>(o, "host_step_inflation", 1);
  for (const auto& [g, seconds] : optional<std::vector<std::pair<int, double>>>(o, "host_sync", {}))
    so.host_sync.push_back({g, seconds});
  so.overlap_needs_idle_cores = optional<bool>(o, "overlap_needs_idle_cores", false);
  so.bucket_bytes = optional<int64_t>(o, "bucket_bytes", so.bucket_bytes);
  so.first_bucket_bytes = optional<int64_t>(o, "first_bucket_bytes", so.first_bucket_bytes);
  return so;
}

py::dict search(const std::vector<py::tuple>& rows, const std::vector<py::tuple>& comm, const py::dict& o) {
  const pl::ModelCost model = model_cost(rows, o);
  const pl::CommTable table = comm_table(comm);
  const pl::SearchOptions so = search_options(o);
  pl::SearchResult r;
  try {
    r = pl::search(model, table, so);
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(std::string("auto_layout: ") + e.what());
  }
  py::list ranked, dropped;
  for (const pl::Prediction& p : r.ranked) ranked.append(prediction_dict(p));
  for (const pl::Dropped& d : r.dropped) {
    py::dict x;
    x["layout"] = layout_dict(d.layout), x["reason"] = d.reason, x["memory_bytes"] = d.memory_bytes;
    dropped.append(x);
  }
  py::dict out;
  out["ranked"] = ranked, out["dropped"] = dropped, out["describe"] = pl::describe(r);
  return out;
}

// One layout priced (layout_search.h evaluate): the prediction with its memory by component.
py::dict evaluate(const std::vector<py::tuple>& rows, const std::vector<py::tuple>& comm, const py::dict& o,
                  const py::dict& layout) {
  const pl::ModelCost model = model_cost(rows, o);
  const pl::CommTable table = comm_table(comm);
  const pl::SearchOptions so = search_options(o);
  pl::Layout l;
  l.data = optional<int>(layout, "data", 1), l.sharded = optional<int>(layout, "sharded", 1);
  l.tensor = optional<int>(layout, "tensor", 1), l.pipeline = optional<int>(layout, "pipeline", 1);
  l.microbatches = optional<int>(layout, "microbatches", 1);
  l.virtual_stages = optional<int>(layout, "virtual_stages", 1);
  l.checkpointing = optional<bool>(layout, "checkpointing", false);
  try {
    return prediction_dict(pl::evaluate(model, table, so, l));
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(std::string("estimate_memory: ") + e.what());
  }
}

// comm_measure.h on the group's communicator: (collective, group, alpha_s, beta) rows, rank
// 0's fit on every rank (collective over the group).
std::vector<py::tuple> measure(ParallelGroup& group, const std::vector<int64_t>& bytes, int warmup, int repeats) {
  pl::MeasureOptions o;
  o.bytes = bytes, o.warmup = warmup, o.repeats = repeats;
  pl::CommTable t;
  try {
    py::gil_scoped_release release;
    t = pl::measure_comm_table(group.heft().communicator(), o);
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(std::string("auto_layout: ") + e.what());
  }
  std::vector<py::tuple> rows;
  for (const pl::CollectiveCost& c : t.entries)
    rows.push_back(py::make_tuple(pl::to_string(c.collective), c.group, c.alpha_s, c.beta_bytes_per_s));
  return rows;
}

// host_probe.h's terms on the group's communicator with a Python callable as the work (every
// rank of the group calls them, with the same kind of work; rank 0's figures on every rank).
// The GIL stays held: the work is Python, and the probe's waits are its own process's.
pl::HostProbeOptions probe_options(int warmup, int rounds) {
  pl::HostProbeOptions o;
  o.warmup = warmup, o.rounds = rounds;
  return o;
}

double inflation(ParallelGroup& group, const py::function& work, int warmup, int rounds) {
  try {
    return pl::measure_inflation(group.heft().communicator(), [&] { work(); }, probe_options(warmup, rounds));
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(std::string("auto_layout: ") + e.what());
  }
}

std::vector<std::pair<int, double>> sync_delay(ParallelGroup& group, const py::function& work,
                                               const std::vector<py::tuple>& comm, int warmup, int rounds) {
  std::vector<pl::SyncDelay> d;
  try {
    d = pl::measure_sync_delay(group.heft().communicator(), [&] { work(); }, comm_table(comm),
                               probe_options(warmup, rounds));
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(std::string("auto_layout: ") + e.what());
  }
  std::vector<std::pair<int, double>> out;
  for (const pl::SyncDelay& x : d) out.emplace_back(x.group, x.seconds);
  return out;
}

// model_measure.h's measure_layers and measure_step over Python callables (the GIL held: they
// run the user's layers); a dict of ModelCost's names.
py::dict measure_layers(const py::function& forward, const py::function& parameters, int layers,
                        const std::vector<std::string>& names, const at::Tensor& batch, int64_t batch_samples,
                        const std::optional<at::Tensor>& larger, int64_t larger_samples, const py::object& loss,
                        bool input_requires_grad, const py::function& make_step, int warmup, int repeats,
                        bool step_probe) {
  if (static_cast<int>(names.size()) != layers)
    throw py::value_error("measure_layers: names: expected " + std::to_string(layers) + ", found " +
                          std::to_string(names.size()));
  // The measurement runs without the GIL (autograd's engine refuses to run holding it); each
  // call into the user's Python takes it back.
  pl::MeasuredModel model;
  model.layers = layers;
  model.forward = [&](int i, const at::Tensor& x) {
    py::gil_scoped_acquire gil;
    return forward(i, x).cast<at::Tensor>();
  };
  model.parameters = [&](int i) {
    py::gil_scoped_acquire gil;
    return parameters(i).cast<std::vector<at::Tensor>>();
  };
  if (!loss.is_none())
    model.loss = [&](const at::Tensor& y) {
      py::gil_scoped_acquire gil;
      return loss(y).cast<at::Tensor>();
    };
  model.input_requires_grad = input_requires_grad;
  py::object probe_step;  // the step probe's optimizer, released here with the GIL held
  if (step_probe)
    model.make_step = [&](std::vector<at::Tensor>& params) {
      py::gil_scoped_acquire gil;
      probe_step = make_step(params);
      return std::function<void()>([&probe_step] {
        py::gil_scoped_acquire gil;
        probe_step();
      });
    };
  pl::LayerMeasureOptions options;
  options.profile = {warmup, repeats};
  options.trim = false;  // the user's process: its allocator is left as it is
  options.step_probe = step_probe;
  pl::LayerMeasurement m;
  double optimizer_s = 0;
  py::object step;  // the optimizer's step, released here with the GIL held
  try {
    py::gil_scoped_release no_gil;
    m = pl::measure_layers(model, batch, batch_samples, larger.value_or(at::Tensor()), larger_samples, options);
    optimizer_s = pl::measure_step(m, [&](std::vector<at::Tensor>& params) {
      py::gil_scoped_acquire gil;
      step = make_step(params);
      return std::function<void()>([&step] {
        py::gil_scoped_acquire gil;
        step();
      });
    });
  } catch (const heft::InvalidArgument& e) {
    throw py::value_error(std::string("auto_layout: ") + e.what());
  }
  py::list rows;
  for (size_t i = 0; i < m.costs.size(); ++i) {
    const auto& c = m.costs[i];
    rows.append(py::make_tuple(names[i], c.forward_s, c.backward_s, c.param_bytes, c.activation_bytes));
  }
  py::dict d;
  d["rows"] = rows;
  d["saved_bytes"] = m.saved_bytes;
  d["forward_fixed_s"] = m.forward_fixed_s;
  d["backward_fixed_s"] = m.backward_fixed_s;
  d["largest_tensor_bytes"] = m.largest_tensor_bytes;
  d["transient_bytes"] = m.transient_bytes;
  d["loss_s"] = m.loss_s;
  d["optimizer_s"] = optimizer_s;
  d["step_peak_bytes"] = m.step_peak_bytes;
  int64_t probe_bytes = 0, all_bytes = 0;  // the host probe's step is sized as heft-train's
  d["step_probe_shapes"] = pl::step_probe_shapes(m, &probe_bytes, &all_bytes);
  return d;
}

}  // namespace

void bind_layout(py::module_& parallel) {
  py::module_ m = parallel.def_submodule("layout", "heft's automatic layout search (layout_search.h)");
  m.def("search", &search, py::arg("layers"), py::arg("comm"), py::arg("options"),
        "the ranked and dropped layouts for (name, forward_s, backward_s, param_bytes, activation_bytes) "
        "rows, (collective, group, alpha_s, beta_bytes_per_s) rows and a dict of options");
  m.def("evaluate", &evaluate, py::arg("layers"), py::arg("comm"), py::arg("options"), py::arg("layout"),
        "one layout priced (data, sharded, tensor, pipeline, microbatches, virtual_stages, "
        "checkpointing): its prediction with memory_parts, the memory by component");
  m.def("measure", &measure, py::arg("group"), py::arg("bytes") = std::vector<int64_t>{16 << 10, 256 << 10, 2 << 20},
        py::arg("warmup") = 2, py::arg("repeats") = 5,
        "(collective, group, alpha_s, beta_bytes_per_s) rows measured on the group's communicator "
        "(comm_measure.h): every rank of the group calls it and gets rank 0's fit");
  m.def("inflation", &inflation, py::arg("group"), py::arg("work"), py::arg("warmup") = 1, py::arg("rounds") = 8,
        "work's median CPU seconds per call on every rank at once over rank 0's alone (host_probe.h)");
  m.def("sync_delay", &sync_delay, py::arg("group"), py::arg("work"), py::arg("comm"), py::arg("warmup") = 1,
        py::arg("rounds") = 12,
        "[(group size, seconds)]: what a synchronisation point costs beyond its collective between calls of "
        "work, per group size (host_probe.h)");
  m.def(
      "describe_host_terms",
      [](double compute, double step, const std::vector<std::pair<int, double>>& sync) {
        std::vector<pl::SyncDelay> d;
        for (const auto& [g, seconds] : sync) d.push_back({g, seconds});
        return pl::describe_host_terms(compute, step, d);
      },
      py::arg("compute_inflation"), py::arg("step_inflation"), py::arg("sync"));
  m.def(
      "optimizer_memory",
      [] {
        py::dict d;
        for (const pl::OptimizerMemory& o : pl::optimizer_memories())
          d[py::str(o.name)] = py::make_tuple(o.state_per_element, o.state_bytes_per_tensor,
                                              o.step_tensor_copies);
        return d;
      },
      "{optimizer: (state elements per parameter element, state bytes per parameter tensor, "
      "step temporaries as copies of the largest parameter tensor)}: the memory model's one "
      "table (parallel/layout/optimizer_memory.h), heft-train's figures");
  m.def("measure_layers", &measure_layers, py::arg("forward"), py::arg("parameters"), py::arg("layers"),
        py::arg("names"), py::arg("batch"), py::arg("batch_samples"), py::arg("larger"), py::arg("larger_samples"),
        py::arg("loss"), py::arg("input_requires_grad"), py::arg("make_step"), py::arg("warmup"),
        py::arg("repeats"), py::arg("step_probe") = false,
        "the model's measured terms (model_measure.h, heft-train's profile) over forward(i, x) -> y, "
        "parameters(i) -> [tensors], loss(y) -> loss or None and make_step([params]) -> step(): a dict "
        "of rows (name, forward_s, backward_s, param_bytes, activation_bytes), saved_bytes, "
        "forward_fixed_s, backward_fixed_s, largest_tensor_bytes, transient_bytes, loss_s, optimizer_s, "
        "step_peak_bytes (with step_probe: two whole steps' peak resident bytes over the resident set "
        "before them)");
  m.def("heap_in_use", &pl::heap_in_use, "bytes malloc has handed out and not taken back (mallinfo2)");
  m.def("peak_resident_bytes", &pl::peak_resident_bytes, "this process's peak resident bytes (ru_maxrss)");
  m.def("resident_bytes", &heft::host::resident_bytes, "this process's resident set in bytes (host/host.h)");
  m.def("online_cpus", &heft::host::online_cpus, "the CPUs online (sysconf; host/host.h)");
  m.def("available_host_memory", [] { return heft::host::available_memory(); },
        "bytes this host can still give: MemAvailable or the cgroup's room, the smaller (host/host.h)");
  m.def("runnable_elsewhere", &heft::host::runnable_elsewhere, py::arg("samples") = 20, py::arg("interval_ms") = 10,
        py::call_guard<py::gil_scoped_release>(),
        "the host's runnable threads besides the caller's: /proc/stat's procs_running sampled and "
        "averaged, less 1 (host/host.h)");
}

}  // namespace heft::torch_backend
