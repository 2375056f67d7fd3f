// heft.torch._c10d: the Python module of heft's torch.distributed backend. The process group
// (process_group.h) and the job store (store_adapter.h) are bound here; the `checkpoint` and
// `step_profiler` submodules in their own files (bindings.h).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "bindings.h"
#include "heft/config/distribution.h"
#include "heft/contract/worker.h"
#include "parallel_group.h"
#include "process_group.h"
#include "staging.h"
#include "store_adapter.h"

namespace {

namespace py = pybind11;
using heft::torch_backend::ProcessGroupHeft;
using heft::comm::shm::PathCounts;

// Some of this rank's shared-memory counters (transport/shm/path_counts.h), by name.
py::dict path_counts(ProcessGroupHeft& pg,
                     std::initializer_list<std::pair<const char*, uint64_t PathCounts::*>> fields) {
  const PathCounts c = pg.communicator().shm_path_counts();
  py::dict d;
  for (const auto& [name, field] : fields) d[name] = c.*field;
  return d;
}

void bind_process_group(py::module_& m) {
  py::class_<ProcessGroupHeft, c10d::Backend, c10::intrusive_ptr<ProcessGroupHeft>>(m, "ProcessGroupHeft")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       double timeout_s) {
             return c10::make_intrusive<ProcessGroupHeft>(
                 store, rank, size,
                 std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>())
      .def("completions", &ProcessGroupHeft::completions,
           "(by a waiter, by the completion thread, run on the caller's thread, completed by the "
           "communicator's thread, issued at once): which path ran and completed the operations")
      .def("operations", &ProcessGroupHeft::operations,
           "operations issued through this group (for tests: the heft path ran)")
      .def("reused_operations", &ProcessGroupHeft::reused_operations,
           "operations reused instead of allocated (for tests: the allocation-free path ran)")
      .def_static("cuda_staged",
           [] {
             const auto& c = heft::torch_backend::cuda_staged();
             py::dict d;
             d["tensors"] = c.tensors.load();
             d["bytes"] = c.bytes.load();
             return d;
           },
           "CUDA tensors this process's heft groups staged through pinned host memory "
           "({'tensors', 'bytes'}; for tests: the staging path ran)")
      .def("last_allreduce_path",
           [](ProcessGroupHeft& pg) { return pg.communicator().last_allreduce_path(); },
           "the algorithm heft's last allreduce ran with (shm/..., ring, ...)")
      .def("bench_allreduce",
           [](ProcessGroupHeft& pg, const at::Tensor& t, int iters) {
             TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(),
                         "bench_allreduce: expected a contiguous CPU float32 tensor, found ",
                         t.toString(), t.is_contiguous() ? "" : " (not contiguous)");
             TORCH_CHECK(iters >= 1, "bench_allreduce: iters: expected >= 1, found ", iters);
             heft::comm::Communicator& c = pg.communicator();
             float* p = t.data_ptr<float>();
             const size_t n = static_cast<size_t>(t.numel());
             py::gil_scoped_release nogil;
             const auto start = std::chrono::steady_clock::now();
             for (int i = 0; i < iters; ++i)
               c.allreduce(p, p, n, heft::comm::DataType::f32, heft::comm::ReduceOp::sum);
             return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                        .count() / iters;
           },
           py::arg("tensor"), py::arg("iters"),
           "`heft bench`'s timed loop on this group's communicator: `iters` in-place float32 "
           "sums of `tensor` with heft's blocking C++ allreduce on the caller's thread (no "
           "torch wrapper, no Work); seconds a call on this rank. For benchmarks that compare "
           "dist.all_reduce with heft's own call in the same processes "
           "(bench/python_allreduce.py --paired). Not for use beside queued operations.")
      .def("has_shared_memory",
           [](ProcessGroupHeft& pg) { return pg.communicator().has_shared_memory(); })
      .def("shm_waits",
           [](ProcessGroupHeft& pg) {
             return path_counts(pg, {{"syncs", &PathCounts::syncs},
                                     {"spun", &PathCounts::spun},
                                     {"yielded", &PathCounts::yielded},
                                     {"slept", &PathCounts::slept},
                                     {"contended", &PathCounts::contended}});
           },
           "this rank's shared-memory synchronisations and how its waits for a peer ended "
           "(spun, yielded, slept on the futex; contended: slow yields that made the next "
           "50 ms of waits sleep at once): transport/shm/context.h's PathCounts")
      .def("shm_placement",
           [](ProcessGroupHeft& pg) {
             return path_counts(pg, {{"probes", &PathCounts::probes},
                                     {"unanswered", &PathCounts::unanswered},
                                     {"probe_ns", &PathCounts::probe_ns},
                                     {"far", &PathCounts::far},
                                     {"direct", &PathCounts::direct}});
           },
           "this rank's placement probes (of them unanswered: ranks free to move shared a CPU "
           "or moved), the last answer's ns per sync, and its direct allreduces, of them run "
           "for the far placement (docs/comm.md, near and far)");
  m.def("backend_of", &heft::torch_backend::backend_of, py::arg("group"),
        "heft's backend (ProcessGroupHeft: its counters and probes) behind a torch process "
        "group on backend heft; a RuntimeError naming the backend found otherwise");
  m.def("shut_down_all", &ProcessGroupHeft::shut_down_all,
        "finishes every live heft group's operations and stops its threads (run at exit)");
  // Before Python finalizes: a group left alive by the script stops its threads here.
  py::module_::import("atexit").attr("register")(m.attr("shut_down_all"));
}

}  // namespace

PYBIND11_MODULE(_c10d, m) {
  py::module::import("torch.distributed");  // registers c10d's Store, ProcessGroup and Backend types
  m.doc() = "heft's torch.distributed backend (see heft.torch)";
  heft::torch_backend::bind_checkpoint(m);
  heft::torch_backend::bind_step_profiler(m);
  heft::torch_backend::bind_data(m);
  heft::torch_backend::bind_mesh(m);
  bind_process_group(m);
  py::module_ parallel = heft::torch_backend::bind_parallel_group(m);
  heft::torch_backend::bind_tensor_parallel(parallel);
  heft::torch_backend::bind_pipeline(parallel);
  heft::torch_backend::bind_sharded(parallel);
  heft::torch_backend::bind_layout(parallel);
  m.def(
      "worker_contract",
      [] {
        const heft::contract::HeftVariables v = heft::contract::HeftVariables::from_process();
        const auto opt = [](const auto& field) -> py::object {
          return field ? py::cast(*field) : py::none();
        };
        py::dict d;
        d["store"] = opt(v.store);
        d["token"] = opt(v.token);
        d["job"] = v.job_name();
        d["timeout_s"] = opt(v.timeout_s);
        d["default_timeout_s"] = heft::contract::kDefaultTimeoutS;
        d["host"] = opt(v.host);
        d["job_dir"] = opt(v.job_dir);
        d["distribution"] = opt(v.distribution);
        d["checkpoint"] = opt(v.checkpoint);
        d["cpus"] = opt(v.cpus);
        return d;
      },
      "heft's worker variables (HEFT_STORE, HEFT_TOKEN, HEFT_JOB, HEFT_TIMEOUT, ...) read and "
      "checked by the C++ reader (contract/worker.h; a malformed number raises an error naming "
      "the variable): None where unset, `job` with its default; docs/worker-contract.md");
  m.def(
      "model_parallel_parameters",
      [](const std::string& text, int world) {
        // The library's parameters read by the job spec's own rules (config/distribution.h),
        // so a script and heft train accept and refuse the same keys with the same words.
        const nlohmann::json given = nlohmann::json::parse(text, nullptr, false);
        if (!given.is_object())
          throw py::value_error("expected a JSON object of the library's parameters, found " +
                                text.substr(0, 200));
        const nlohmann::json block = {
            {"smdistributed", {{"modelparallel", {{"enabled", true}, {"parameters", given}}}}}};
        auto parsed = heft::config::Distribution::parse(block);
        if (!parsed.ok()) throw py::value_error(parsed.error());
        if (const heft::Status fits = world > 0 ? parsed.value().check_world(world)
                                                : heft::Status::success();
            !fits.ok())
          throw py::value_error(fits.error());
        return parsed.value().to_json()["modelparallel"]["parameters"].dump();
      },
      py::arg("parameters_json"), py::arg("world"),
      "The model-parallel library's parameters (a JSON object's text) read by the job spec's "
      "rules (config/distribution.h) and checked against `world` ranks: heft's form with every "
      "knob's value, as JSON text (world 0: not checked against a world); ValueError with one "
      "line per problem, led by its field.");
  m.def("job_store", &heft::torch_backend::job_store, py::arg("timeout_s"),
        py::call_guard<py::gil_scoped_release>(),
        "a c10d store over heft's authenticated job store (HEFT_STORE, HEFT_TOKEN)");
}
