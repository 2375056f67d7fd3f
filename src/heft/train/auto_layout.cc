#include "heft/train/auto_layout.h"

#include <malloc.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <optional>
#include <numeric>
#include <sstream>

#include "heft/comm/options.h"
#include "heft/error.h"
#include "heft/host/host.h"
#include "heft/parallel/layout/comm_measure.h"
#include "heft/parallel/layout/host_probe.h"
#include "heft/parallel/layout/model_measure.h"
#include "heft/parallel/layout/optimizer_memory.h"
#include "heft/train/models.h"
#include "heft/train/pipeline_strategy.h"
#include "heft/train/text.h"

namespace heft::train {

namespace {

using parallel::layout::CommTable;
using parallel::layout::ModelCost;
using parallel::layout::Prediction;

// heft-train's optimizer in the memory model's table (parallel/layout/optimizer_memory.h).
const parallel::layout::OptimizerMemory& optimizer_memory(const Hyperparameters& hp) {
  return parallel::layout::optimizer_memory(hp.optimizer == "adamw" ? "adamw"
                                            : hp.momentum != 0      ? "sgd-momentum"
                                                                    : "sgd");
}

// Peak RSS beyond what the profile measures, fitted to bench/auto_layout.sh's rows (three GPTs,
// 4 ranks, docs/auto-layout.md) so that no row's peak passes its prediction: the share of the
// last stage's transient bytes the allocator keeps beside them (freed logits' blocks), every
// run's own bytes (the kernels' code pages a step first touches, malloc's blocks), and a
// replicated or sharded layout's (its gradient collectives' buffers and blocks).
constexpr double kTransientRetention = 0.5;
constexpr int64_t kRunBytes = 40'000'000;
constexpr int64_t kReplicaGroupBytes = 45'000'000;

// Rank 0's numbers, in the order they are broadcast: a header, then kRow a layer.
constexpr size_t kRow = 8;
struct Header {
  double layers = 0, fixed_bytes = 0, limit_bytes = 0, optimizer_s = 0, transient_bytes = 0;
  double cores = 1, threads = 1, load = 0;  // the host's
  double profile_peak_bytes = 0, profile_residue_bytes = 0;
  static constexpr size_t kCount = 10;
};

// A step's work after the backward on `params` (their gradients set): heft's gradient norm
// when hp clips (each gradient's squared norm summed, then scaled: mesh_strategy.h's
// clip_replica) and the optimizer's step.
class StepProbe {
 public:
  StepProbe(const Hyperparameters& hp, std::vector<torch::Tensor> params) : clip_(hp.grad_clip > 0), params_(params) {
    for (torch::Tensor& p : params_) {
      p.requires_grad_(true);
      p.mutable_grad() = torch::zeros_like(p);
    }
    if (hp.optimizer == "adamw")
      optimizer_ = std::make_unique<torch::optim::AdamW>(params_, torch::optim::AdamWOptions(1e-6));
    else
      optimizer_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(1e-6).momentum(hp.momentum));
  }
  void run() {
    if (clip_) {
      double sq = 0;
      for (const torch::Tensor& p : params_) sq += squared_norm(p.grad());
      torch::NoGradGuard no_grad;
      const double coefficient = 1 / (std::sqrt(sq) + 1.0);  // < 1: the scaling runs, as it does when clipping
      for (torch::Tensor& p : params_) p.mutable_grad().mul_(coefficient);
    }
    optimizer_->step();
  }

 private:
  bool clip_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// The host terms (parallel/layout/host_probe.h) on every rank of `comm`: the compute probe is
// a GPT block's MLP (C -> 4C -> C, GELU) forward and backward on one rank's micro-batch of
// `batch` sequences (the profile's), the step probe StepProbe on one flat tensor of the
// profile's optimizer probe size. Every rank gets rank 0's figures.
void measure_host_terms(const Hyperparameters& hp, int64_t batch, const std::vector<double>& step_probe_numels,
                        const CommTable& table, comm::Communicator& comm, parallel::layout::SearchOptions& o) {
  torch::NoGradGuard outside;  // the probes' own graphs only
  const int64_t c = hp.n_embd, rows = batch * hp.block_size;
  const torch::Tensor x = torch::randn({rows, c});
  const torch::Tensor w1 = torch::randn({c, 4 * c}).mul_(0.02).requires_grad_(true);
  const torch::Tensor w2 = torch::randn({4 * c, c}).mul_(0.02).requires_grad_(true);
  const std::function<void()> block = [&] {
    torch::AutoGradMode grad(true);
    const torch::Tensor y = torch::gelu(x.mm(w1)).mm(w2);
    y.sum().backward();
  };
  parallel::layout::HostProbeOptions options;
  o.host_compute_inflation = parallel::layout::measure_inflation(comm, block, options);
  {
    std::vector<torch::Tensor> params;
    for (double n : step_probe_numels) params.push_back(torch::randn({static_cast<int64_t>(n)}));
    StepProbe step(hp, std::move(params));
    options.warmup = 2, options.rounds = 3;  // as optimizer_profile: past the first runs' page faults
    o.host_step_inflation = parallel::layout::measure_inflation(comm, [&] { step.run(); }, options);
  }
  // Between synchronisation points: the block's forward (a tensor-parallel layer's gap), 12
  // rounds: the probe stays short on a wide model.
  const std::function<void()> forward = [&] { (void)torch::gelu(x.mm(w1)).mm(w2); };
  options.warmup = 1, options.rounds = 12;
  o.host_sync = parallel::layout::measure_sync_delay(comm, forward, table, options);
}

// Profiles hp's model on this process (the global generator's state put back): the header's
// memory and step figures (the optimizer's on a probe, after the model is freed), and rows of (forward_s, backward_s, param_bytes,
// activation_bytes, saved_bytes, forward_fixed_s, backward_fixed_s, largest_tensor_bytes).
// The task's text is loaded first, so the runtime's bytes hold it as a run's will. The model's
// parameters are built whole; gradients and optimizer state exist for one layer at a time.
// The process's peak resident bytes after it, and what it keeps beyond the runtime's once its
// heap is given back, go into the header.
std::vector<double> profile(const Hyperparameters& hp, int64_t batch, Header& h, std::vector<double>* probe_numels) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  std::optional<TextCorpus> corpus;
  try {
    corpus = load_text_corpus(hp.data.empty() ? kDefaultFortunesDir : hp.data, hp.block_size);
  } catch (const std::exception&) {
    // the run reports it; the plan goes on without the text's bytes
  }
  h.fixed_bytes = static_cast<double>(host::resident_bytes());
  parallel::layout::LayerMeasurement layers;
  {
    torch::manual_seed(static_cast<uint64_t>(hp.seed));
    ModelContext context;
    context.hp = hp;
    const std::shared_ptr<Model> model = make_model(hp.model, context);
    // Again at twice the samples (at most the global batch) for the per-call part.
    const int64_t larger = std::min<int64_t>(2 * batch, std::max<int64_t>(batch, hp.batch_size));
    const torch::Tensor targets = torch::randint(0, hp.vocab, {batch, hp.block_size}, torch::kLong);
    parallel::layout::MeasuredModel measured;
    measured.layers = static_cast<int>(model->layer_names().size());
    measured.forward = [&](int i, const torch::Tensor& x) { return model->forward_range(i, i, x); };
    measured.parameters = [&](int i) { return model->layer_parameters(i); };
    measured.loss = [&](const torch::Tensor& y) {
      return torch::nn::functional::cross_entropy(y.reshape({-1, y.size(-1)}), targets.reshape({-1}));
    };
    // Every layer but the head emptied once measured: the profile holds the model's parameters
    // only while it has not reached them.
    measured.measured = [&](int i) {
      torch::NoGradGuard no_grad;
      for (torch::Tensor& t : model->layer_parameters(i)) t.set_data(torch::empty({0}, t.options()));
    };
    layers = parallel::layout::measure_layers(measured, model->sample_input(batch), batch,
                                              larger > batch ? model->sample_input(larger) : torch::Tensor(), larger);
  }  // the model's parameters freed before the optimizer's state exists
  int64_t probe_bytes = 0, all_bytes = 0;
  for (const std::vector<int64_t>& shape : parallel::layout::step_probe_shapes(layers, &probe_bytes, &all_bytes))
    probe_numels->push_back(static_cast<double>(c10::multiply_integers(shape)));
  std::unique_ptr<StepProbe> step;
  h.optimizer_s = parallel::layout::measure_step(layers, [&](std::vector<torch::Tensor>& params) {
    step = std::make_unique<StepProbe>(hp, params);
    return std::function<void()>([&] { step->run(); });
  });
  step.reset();  // the probe's state freed before the profile's residue is read
  h.transient_bytes = static_cast<double>(layers.transient_bytes);
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  h.profile_peak_bytes = static_cast<double>(parallel::layout::peak_resident_bytes());
  ::malloc_trim(0);  // the profile's heap back to the system: the run starts from the runtime's
  h.profile_residue_bytes =
      std::max(0.0, static_cast<double>(host::resident_bytes()) - h.fixed_bytes);
  std::vector<double> rows;
  for (size_t i = 0; i < layers.costs.size(); ++i) {
    const parallel::pipeline::LayerCost& c = layers.costs[i];
    rows.insert(rows.end(), {c.forward_s, c.backward_s, static_cast<double>(c.param_bytes),
                             static_cast<double>(c.activation_bytes), static_cast<double>(layers.saved_bytes[i]),
                             layers.forward_fixed_s[i], layers.backward_fixed_s[i],
                             static_cast<double>(layers.largest_tensor_bytes[i])});
  }
  return rows;
}

// Rank 0's header: the limit and the host's cores, ranks x threads and `load` (its other
// runnable threads found at the start).
Header local_header(const config::Distribution& d, double load, std::string* memory_source) {
  Header h;
  const int local = std::max(1, std::stoi(comm::env_or("LOCAL_WORLD_SIZE", "1")));
  if (d.modelparallel.memory_limit_gb > 0) {
    h.limit_bytes = d.modelparallel.memory_limit_gb * 1e9;
    *memory_source = "memory_limit_gb";
  } else {
    std::string from;
    h.limit_bytes = static_cast<double>(host::available_memory(&from)) / local;
    *memory_source = from + " / " + std::to_string(local) + " ranks on the host";
  }
  h.cores = static_cast<double>(host::online_cpus());
  h.threads = static_cast<double>(local) * torch::get_num_threads();
  h.load = load;
  return h;
}

// How many ranked layouts heft-train prints: HEFT_LAYOUT_TOP (bench/auto_layout.sh reads them
// all), else 5.
int top_shown() {
  const std::string v = comm::env_or("HEFT_LAYOUT_TOP", "5");
  if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos) return 5;
  return std::stoi(v);
}

std::string fixed(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

LayoutInputs layout_inputs(const Hyperparameters& hp, const config::Distribution& d, comm::Communicator& comm,
                           int world_size) {
  if (hp.model != "gpt")
    throw InvalidArgument("auto_layout: expected a model cut into layers (model gpt), found model " + hp.model);
  LayoutInputs in;
  const int64_t batch = std::max<int64_t>(1, hp.batch_size / world_size);
  const double load = comm.rank() == 0 ? host::runnable_elsewhere() : 0;  // the others wait asleep
  // The communicator first: its buffers are then part of the runtime's bytes rank 0 reads.
  in.comm_measured = comm.size() > 1;
  in.comm = in.comm_measured ? parallel::layout::measure_comm_table(comm) : parallel::layout::default_comm_table();
  ::malloc_trim(0);  // the measurement's buffers back to the system, on every rank
  Header h;
  std::vector<double> rows, probe_numels;
  if (comm.rank() == 0) {
    h = local_header(d, load, &in.memory_source);
    rows = profile(hp, batch, h, &probe_numels);
    h.layers = static_cast<double>(rows.size() / kRow);
  } else {
    in.memory_source = "world rank 0's";
  }
  double header[Header::kCount] = {h.layers, h.fixed_bytes, h.limit_bytes, h.optimizer_s, h.transient_bytes,
                                   h.cores, h.threads, h.load, h.profile_peak_bytes, h.profile_residue_bytes};
  comm.broadcast(header, Header::kCount, comm::DataType::f64, 0);
  rows.resize(static_cast<size_t>(header[0]) * kRow);
  comm.broadcast(rows.data(), rows.size(), comm::DataType::f64, 0);
  in.model.optimizer_s = header[3];
  in.model.transient_bytes = static_cast<int64_t>(header[4]);
  in.options.host_cores = header[5];
  in.options.host_threads = header[6];
  in.options.host_load = header[7];
  in.contention = std::max(1.0, (header[6] + header[7]) / header[5]);
  ModelCost& m = in.model;
  for (size_t i = 0; i < rows.size() / kRow; ++i) {
    const double* r = &rows[i * kRow];
    m.layers.push_back({"layer" + std::to_string(i), r[0], r[1],
                        static_cast<int64_t>(r[2]), static_cast<int64_t>(r[3])});
    m.saved_bytes.push_back(static_cast<int64_t>(r[4]));
    m.forward_fixed_s.push_back(r[5]);
    m.backward_fixed_s.push_back(r[6]);
    m.largest_tensor_bytes.push_back(static_cast<int64_t>(r[7]));
  }
  m.profiled_batch = static_cast<int>(batch);
  m.fixed_bytes = static_cast<int64_t>(header[1]);
  m.optimizer_bytes_per_param_byte = optimizer_memory(hp).state_per_element;
  m.tensor_allreduces_per_layer = 4;  // a block: attention and MLP, forward and backward
  // The tensor degree must divide the heads and the vocabulary (vocabulary-parallel head).
  m.heads = static_cast<int>(std::gcd(hp.n_head, hp.vocab));
  // Peak RSS per rank, measured (docs/auto-layout.md): DDP's gradients are views of its flat
  // buckets (no second copy); autograd's fresh gradient of a tensor before it is added in;
  // after the backward the optimizer's temporaries (heft's gradient norm reduces in place:
  // optimizer.h's squared_norm) (AdamW 2, SGD with momentum 1), in holes of their own; the freed
  // logits' blocks the allocator keeps.
  m.replica_gradient_copies = 0;
  m.sharded_gradient_copies = 1;  // the units' full gradients before the reduce-scatters
  m.backward_tensor_copies = 1;
  m.step_tensor_copies = optimizer_memory(hp).step_tensor_copies;
  m.transient_retention = kTransientRetention;
  m.run_bytes = kRunBytes;
  m.replica_group_bytes = kReplicaGroupBytes;
  m.profile_peak_bytes = static_cast<int64_t>(header[8]);
  m.profile_residue_bytes = static_cast<int64_t>(header[9]);
  parallel::layout::SearchOptions& o = in.options;
  o.world = world_size;
  o.memory_limit_bytes = static_cast<int64_t>(header[2]);
  o.global_batch = static_cast<int>(hp.batch_size);
  o.memory_weight = d.modelparallel.memory_weight;
  o.overlap_gradients = true;  // DDP's buckets reduce during the backward
  o.overlap_needs_idle_cores = true;
  o.bucket_bytes = static_cast<int64_t>(hp.bucket_mb * (1 << 20));
  o.first_bucket_bytes = std::min<int64_t>(o.first_bucket_bytes, o.bucket_bytes);
  if (in.comm_measured) {
    // The step probe: the profile's optimizer probe's tensors (the largest layer's, at most 8 MiB).
    double count = static_cast<double>(probe_numels.size());
    comm.broadcast(&count, 1, comm::DataType::f64, 0);
    probe_numels.resize(static_cast<size_t>(count));
    comm.broadcast(probe_numels.data(), probe_numels.size(), comm::DataType::f64, 0);
    const auto t0 = std::chrono::steady_clock::now();
    measure_host_terms(hp, batch, probe_numels, in.comm, comm, o);
    ::malloc_trim(0);  // the probes' heap back to the system, on every rank
    in.host_probe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return in;
}

config::Distribution layout_distribution(const config::Distribution& base, const Prediction& p,
                                         int64_t* gradient_accumulation) {
  config::Distribution d = base;
  config::ModelParallel& m = d.modelparallel;
  const parallel::layout::Layout& l = p.layout;
  m.enabled = true;
  m.partitions = l.pipeline;
  m.microbatches = l.pipeline > 1 ? l.microbatches : 1;
  m.virtual_stages = l.virtual_stages;
  m.tensor_parallel_degree = l.tensor;
  m.sharded_data_parallel_degree = l.sharded;
  m.activation_checkpointing = l.checkpointing;
  m.pipeline = "interleaved";
  m.active_microbatches = l.pipeline + 2;
  m.partition_boundaries.clear();
  m.auto_partition = true;
  if (l.pipeline > 1) {  // the split the search priced
    m.auto_partition = false;
    m.partition_boundaries.assign(p.stage_first.begin() + 1, p.stage_first.end());
  }
  *gradient_accumulation = l.pipeline > 1 ? 1 : l.microbatches;
  return d;
}

std::string layout_fields(const Prediction& p, double memory_limit_bytes) {
  const parallel::layout::Layout& l = p.layout;
  std::ostringstream os;
  os << "data=" << l.data << " sharded=" << l.sharded << " tensor=" << l.tensor << " pipeline=" << l.pipeline
     << " microbatches=" << l.microbatches << " virtual_stages=" << l.virtual_stages
     << " checkpointing=" << (l.checkpointing ? 1 : 0) << " predicted_step_s=" << fixed("%.4f", p.step_s)
     << " predicted_memory_gb=" << fixed("%.3f", static_cast<double>(p.memory_bytes) / 1e9)
     << " memory_limit_gb=" << fixed("%.3f", memory_limit_bytes / 1e9);
  return os.str();
}

std::string describe_inputs(const LayoutInputs& in) {
  std::ostringstream os;
  os << "auto_layout: " << in.model.layers.size() << " layers profiled on one rank at " << in.model.profiled_batch
     << " samples (CPU seconds; x " << fixed("%.2f", in.contention) << " with every rank busy: "
     << fixed("%.0f", in.options.host_threads) << " ranks x threads + load " << fixed("%.1f", in.options.host_load)
     << " over " << fixed("%.0f", in.options.host_cores) << " cores); runtime " << parallel::layout::format_bytes(in.model.fixed_bytes)
     << " resident (with the text), a step's transient " << parallel::layout::format_bytes(in.model.transient_bytes)
     << ", optimizer " << fixed("%.1f", in.model.optimizer_s * 1e3) << " ms; rank 0's profile peaked at "
     << parallel::layout::format_bytes(in.model.profile_peak_bytes) << " resident and keeps "
     << parallel::layout::format_bytes(in.model.profile_residue_bytes) << "; memory limit " << parallel::layout::format_bytes(in.options.memory_limit_bytes) << " per rank ("
     << in.memory_source << ")\n";
  if (in.comm_measured)
    os << "auto_layout: host terms measured on " << in.options.world << " ranks in "
       << fixed("%.2f", in.host_probe_s) << " s (CPU per unit of work, every rank busy over rank 0 alone: "
       << parallel::layout::describe_host_terms(in.options.host_compute_inflation, in.options.host_step_inflation,
                                                in.options.host_sync)
       << " per point beyond its collective); the gradient collective hides behind the backward only on idle cores\n";
  else
    os << "auto_layout: host terms not measured (one process): compute and step x1, no synchronisation delay\n";
  if (in.comm_measured)
    os << "auto_layout: collective costs measured on " << in.options.world
       << " ranks (seconds = alpha + bytes / beta):\n";
  else
    os << "auto_layout: collective costs are the defaults (50 us + bytes / 2 GB/s), not measured: one process "
          "has no communicator to measure\n";
  std::istringstream table(parallel::layout::describe(in.comm));
  for (std::string line; std::getline(table, line);) os << "  " << line << "\n";
  return os.str();
}

LayoutChoice choose_layout(const Hyperparameters& hp, const config::Distribution& d, comm::Communicator& world,
                           std::ostream& out) {
  LayoutChoice c;
  c.inputs = layout_inputs(hp, d, world, world.size());
  if (world.rank() == 0) out << describe_inputs(c.inputs) << std::flush;
  c.result = parallel::layout::search(c.inputs.model, c.inputs.comm, c.inputs.options);
  c.prediction = c.result.ranked.front();
  c.distribution = layout_distribution(d, c.prediction, &c.gradient_accumulation);
  if (world.rank() == 0)
    out << parallel::layout::describe(c.result, top_shown(), 0) << "layout: "
        << layout_fields(c.prediction, static_cast<double>(c.inputs.options.memory_limit_bytes)) << std::endl;
  return c;
}

}  // namespace heft::train
