// _c10d.parallel.sharded (bindings.h): heft's sharded data path (parallel/sharded/flat_engine.h)
// for heft.torch.parallel.ShardedDataParallel. The Python side selects units, flattens
// parameters, makes views and hooks autograd; every collective of sharding (the first rank's
// values, all-gathers, reduce-scatters, the replicas' average, the gradient norm, the full
// values of a checkpoint) runs here, in the engine heft-train's ShardedDataParallel runs.
// Calls that communicate or wait run without the GIL.
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "heft/error.h"
#include "heft/parallel/sharded/flat_engine.h"
#include "heft/parallel/sharded/sharded_checkpoint.h"
#include "parallel_group.h"

namespace heft::torch_backend {

namespace py = pybind11;
namespace sh = parallel::sharded;

namespace {

// The engine and the groups it runs on (kept alive with it).
class Engine {
 public:
  Engine(std::shared_ptr<ParallelGroup> shard, std::shared_ptr<ParallelGroup> replicate,
         sh::EngineOptions options)
      : shard_(std::move(shard)),
        replicate_(std::move(replicate)),
        engine_(shard_ ? &shard_->tensors() : nullptr, replicate_ ? &replicate_->tensors() : nullptr,
                options) {}
  sh::FlatEngine& operator*() { return engine_; }
  sh::FlatEngine* operator->() { return &engine_; }

 private:
  std::shared_ptr<ParallelGroup> shard_, replicate_;
  sh::FlatEngine engine_;
};

}  // namespace

void bind_sharded(py::module_& parallel) {
  py::module_ m = parallel.def_submodule(
      "sharded", "heft's sharded data path (heft.torch.parallel.ShardedDataParallel)");
  using release = py::call_guard<py::gil_scoped_release>;
  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def(py::init([](std::shared_ptr<ParallelGroup> shard, std::shared_ptr<ParallelGroup> replicate,
                       at::ScalarType compute_dtype, at::ScalarType reduce_dtype,
                       int max_reductions_in_flight) {
             sh::EngineOptions o;
             o.compute_dtype = compute_dtype;
             o.reduce_dtype = reduce_dtype;
             o.max_reductions_in_flight = max_reductions_in_flight;
             return value_errors([&] { return std::make_shared<Engine>(shard, replicate, o); });
           }),
           py::arg("shard"), py::arg("replicate"), py::arg("compute_dtype"), py::arg("reduce_dtype"),
           py::arg("max_reductions_in_flight"),
           "shard/replicate: _c10d.parallel.Group or None (one rank; no replicas)")
      .def_property_readonly("shard_size", [](Engine& e) { return e->shard_size(); })
      .def_property_readonly("shard_rank", [](Engine& e) { return e->shard_rank(); })
      .def("shard_numel_for", [](Engine& e, int64_t n) { return e->shard_numel_for(n); }, py::arg("numel"))
      .def("shard_of_first_rank",
           [](Engine& e, const at::Tensor& values) { return e->shard_of_first_rank(values); },
           py::arg("values"), release(),
           "this rank's float32 shard of a flat's values as rank 0 of the groups has them (collective)")
      .def("add_flat",
           [](Engine& e, const at::Tensor& shard, int64_t numel) {
             return value_errors([&] { return e->add_flat(shard, numel); });
           },
           py::arg("shard"), py::arg("numel"))
      .def("add_unit",
           [](Engine& e, std::vector<int> flats) {
             return value_errors([&] { return e->add_unit(std::move(flats)); });
           },
           py::arg("flats"))
      .def("full", [](Engine& e, int f) { return e->full(f); }, py::arg("flat"),
           "the flat's full buffer (storage only while its unit is gathered)")
      .def("gather", [](Engine& e, int u, bool prefetch) { e->gather(u, prefetch); }, py::arg("unit"),
           py::arg("prefetch"), release())
      .def("wait_gathered", [](Engine& e, int u) { e->wait_gathered(u); }, py::arg("unit"), release())
      .def("release", [](Engine& e, int u) { e->release(u); }, py::arg("unit"), release())
      .def("gathered", [](Engine& e, int u) { return e->gathered(u); }, py::arg("unit"))
      .def("gather_in_flight", [](Engine& e) { return e->gather_in_flight(); })
      .def("reduce",
           [](Engine& e, int f, const at::Tensor& grad) {
             value_errors([&] {
               e->reduce(f, grad);
               return 0;
             });
           },
           py::arg("flat"), py::arg("grad"), release())
      .def("finish_reductions", [](Engine& e) { e->finish_reductions(); }, release())
      .def("reductions_pending", [](Engine& e) { return e->reductions_pending(); })
      .def("full_values",
           [](Engine& e, int f, std::optional<at::Tensor> part) {
             return value_errors([&] { return e->full_values(f, part ? *part : at::Tensor()); });
           },
           py::arg("flat"), py::arg("part") = py::none(), release(),
           "the flat's float32 values, every rank's shard (or `part` of it) joined (collective)")
      .def("my_slice", [](Engine& e, int f, const at::Tensor& v) { return e->my_slice(f, v); },
           py::arg("flat"), py::arg("padded_values"))
      .def("clip_grad_norm",
           [](Engine& e, double max_norm, double norm_type) { return e->clip_grad_norm(max_norm, norm_type); },
           py::arg("max_norm"), py::arg("norm_type"), release())
      .def("counters", [](Engine& e) {
        const sh::ShardedCounters& c = e->counters();
        py::dict d;
        d["allgathers"] = c.allgathers;
        d["prefetched"] = c.prefetched;
        d["max_gathered"] = c.max_gathered;
        d["reduce_scatters"] = c.reduce_scatters;
        d["replicate_allreduces"] = c.replicate_allreduces;
        d["reductions_capped"] = c.reductions_capped;
        d["max_reductions_in_flight"] = c.max_reductions_in_flight;
        return d;
      })
      .def("reset_counters", [](Engine& e) { e->reset_counters(); });

  // The one sharded checkpoint format (parallel/sharded/sharded_checkpoint.h): Python hands
  // over tensors and names, C++ writes and reads the files.
  m.def(
      "write_part",
      [](const py::list& flats, const py::dict& header) {
        std::vector<sh::SavedFlat> saved;
        for (const py::handle& h : flats) {
          const py::dict f = h.cast<py::dict>();
          sh::SavedFlat s;
          s.param = f["param"].cast<at::Tensor>();
          s.state = f["state"].cast<std::map<std::string, at::Tensor>>();
          s.step = f["step"].cast<int64_t>();
          s.info.unit = f["unit"].cast<int>();
          s.info.numel = f["numel"].cast<int64_t>();
          s.info.shard_numel = f["shard_numel"].cast<int64_t>();
          for (const py::handle& mh : f["members"].cast<py::list>()) {
            const py::dict m = mh.cast<py::dict>();
            const auto names = m["names"].cast<std::vector<std::string>>();
            s.info.members.push_back({names.at(0), m["shape"].cast<std::vector<int64_t>>(),
                                      m["offset"].cast<int64_t>(), m["numel"].cast<int64_t>()});
            if (names.size() > 1) s.aliases[names[0]] = {names.begin() + 1, names.end()};
          }
          saved.push_back(std::move(s));
        }
        sh::PartHeader p;
        p.optimizer_name = header["optimizer"].cast<std::string>();
        p.shard_size = header["shard_size"].cast<int>();
        p.shard_rank = header["shard_rank"].cast<int>();
        p.replicate_rank = header["replicate_rank"].cast<int>();
        p.buffers = header["buffers"].cast<std::map<std::string, at::Tensor>>();
        p.extra_json = header["extra_json"].cast<std::string>();
        std::map<std::string, std::string> files;
        {
          py::gil_scoped_release release;
          files = value_errors([&] { return sh::write_part(saved, p); });
        }
        py::dict out;
        for (const auto& [name, bytes] : files) out[py::str(name)] = py::bytes(bytes);
        return out;
      },
      py::arg("flats"), py::arg("header"),
      "a part's files (name -> bytes) from this rank's flats: [{param, state, step, unit, numel, "
      "shard_numel, members: [{names, shape, offset, numel}]}] and header {optimizer, shard_size, "
      "shard_rank, replicate_rank, buffers, extra_json}");
  py::class_<sh::ShardedReader>(m, "Reader",
                                 "a verified sharded checkpoint's parts (name -> path each), read "
                                 "one saved flat at a time; OSError names `who` and the file")
      .def(py::init([](std::vector<std::map<std::string, std::string>> parts, const std::string& who) {
             py::gil_scoped_release release;
             return sh::ShardedReader::from_files(std::move(parts), who);
           }),
           py::arg("parts"), py::arg("who"))
      .def("__len__", &sh::ShardedReader::size)
      .def("names", &sh::ShardedReader::names, "every saved parameter name, tied names included")
      .def("buffers", &sh::ShardedReader::buffers)
      .def("extra_json", &sh::ShardedReader::extra_json)
      .def("optimizer_name", &sh::ShardedReader::optimizer_name)
      .def(
          "read",
          [](sh::ShardedReader& r, size_t i) {
            sh::NamedState s;
            {
              py::gil_scoped_release release;
              s = r.read(i);
            }
            py::dict out;
            out["params"] = s.params;
            out["optimizer"] = s.optimizer;
            out["step"] = s.adam_step;
            out["aliases"] = s.aliases;
            return out;
          },
          py::arg("flat"),
          "flat i as full tensors by name: params, optimizer ({name: {state: tensor}}), step, "
          "aliases ({other name: name})");
}

}  // namespace heft::torch_backend
