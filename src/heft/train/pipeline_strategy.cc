#include "heft/train/pipeline_strategy.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

#include "heft/check.h"
#include "heft/error.h"
#include "heft/parallel/pipeline/pipeline.h"
#include "heft/parallel/pipeline/schedule.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/mesh_strategy.h"

namespace heft::train {

namespace {

using detail::Bf16Autocast;
using detail::bytes_of;
using detail::ddp_options;
using detail::MeshStrategy;
using detail::optimizer_state_bytes;

// CPU seconds of the process (every thread), not wall time: on a shared machine the time a
// layer or a step waits for a core is noise, the CPU it uses is not.
double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The model cut into stages over the mesh's pipeline group; each stage replicated over the
// data group with DDP (and split over the tensor group when the model is). A step runs the
// schedule's action list for this stage (parallel/pipeline): micro-batches forward and
// backward, activations and their gradients exchanged with the neighbouring stages; the
// loss lives on the last stage, whose first data and tensor rank reports.
class Pipelined : public MeshStrategy {
 public:
  Pipelined(const Hyperparameters& hp, const config::ModelParallel& settings,
            parallel::DeviceMesh& mesh, std::shared_ptr<Model> model,
            const OptimizerConfig& optimizer)
      : MeshStrategy(hp, settings, mesh, std::move(model)),
        settings_(settings),
        pipe_(mesh.group(parallel::Dim::kPipeline)),
        schedule_(parallel::pipeline::make_schedule(settings.pipeline, pipe_.size(),
                                                    settings.microbatches,
                                                    settings.active_microbatches,
                                                    settings.virtual_stages)) {
    const std::vector<std::string> names = model_->layer_names();
    if (names.empty())
      throw InvalidArgument("partitions: model " + hp.model + " cannot be cut into pipeline stages (gpt can)");
    plan_ = make_plan(mesh);
    // This rank holds virtual stages s, s + p, ...: one chunk of consecutive layers each.
    std::vector<bool> keep(names.size(), false);
    for (int c = 0; c < settings.virtual_stages; ++c) {
      const int vs = c * pipe_.size() + pipe_.rank();
      const int first = plan_.first[static_cast<size_t>(vs)];
      const int last = plan_.last_layer(vs, static_cast<int>(names.size()));
      chunks_.push_back({first, last});
      for (int l = first; l <= last; ++l) keep[static_cast<size_t>(l)] = true;
    }
    stage_first_ = chunks_.front().first;
    stage_last_ = chunks_.back().second;
    model_->keep_layers(keep);
    const parallel::pipeline::Simulation sim = parallel::pipeline::simulate(schedule_);
    if (!sim.ok) throw InvalidArgument("pipeline schedule: " + sim.error);
    if (settings.sharded_data_parallel_degree > 1) {
      // Each stage's layers sharded over the stage's data ranks (its units: the blocks it
      // holds; the rest of its layers the root).
      sdp_ = shard_model(mesh, optimizer);
      optimizer_ = shard_optimizer(*sdp_, optimizer);
      replicate_rank_ = mesh.coordinate(parallel::Dim::kReplicate);
      return;
    }
    ddp_ = std::make_unique<parallel::data::DistributedDataParallel>(
        std::static_pointer_cast<torch::nn::Module>(model_), data_, ddp_options(hp));
    optimizer_ = make_optimizer(optimizer, model_->parameters());
    if (activation_checkpointing_) recompute_units();
  }

  std::string describe() const override {
    const std::vector<std::string> names = model_->layer_names();
    std::string mine;
    for (const auto& [first, last] : chunks_)
      mine += (mine.empty() ? "" : ", ") + names[static_cast<size_t>(first)] + " .. " +
              names[static_cast<size_t>(last)];
    return "pipeline (" + std::to_string(pipe_.size()) + " stages" +
           (settings_.virtual_stages > 1 ? " x " + std::to_string(settings_.virtual_stages) + " virtual" : "") +
           ", " + settings_.pipeline + ", " + std::to_string(settings_.microbatches) +
           " micro-batches; this stage: layers " + mine + ") x data_parallel " +
           std::to_string(data_.size()) + tensor_text() + "\n" +
           parallel::pipeline::describe(plan_, costs_) + profile_text();
  }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    const double cpu0 = process_cpu_seconds();
    set_learning_rate(*optimizer_, lr);
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad().reset();
    const int m = settings_.microbatches;
    if (batch.inputs.size(0) % m != 0)
      throw InvalidArgument("microbatches: " + std::to_string(m) +
                            " does not divide this data-parallel rank's share of the batch (" +
                            std::to_string(batch.inputs.size(0)) + " samples)");
    const auto xs = batch.inputs.chunk(m, 0), ys = batch.targets.chunk(m, 0);
    const double scale = static_cast<double>(data_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const int V = settings_.virtual_stages * pipe_.size();
    parallel::pipeline::StageFunctions f;
    f.forward = [&](int chunk, int j, const torch::Tensor& input) {
      const int vs = chunk * pipe_.size() + pipe_.rank();
      const auto [first, last] = chunks_[static_cast<size_t>(chunk)];
      if (sdp_) sdp_->begin_forward();
      // Activations cross stages in float32. bf16: a sharded stage casts them to the compute
      // dtype on arrival; a DDP stage computes under autocast (Bf16Autocast), its parameters
      // and their gradients float32.
      torch::Tensor out = [&] {
        Bf16Autocast bf16(bf16_ && !sdp_);
        return model_->forward_range(first, last, vs == 0 ? xs[j] : to_compute(input));
      }();
      if (vs != V - 1) return out.to(torch::kFloat);
      out = out.to(torch::kFloat);
      torch::Tensor loss = loss_of(out, ys[j], task);
      total += loss.detach().to(torch::kDouble);
      return loss * scale;
    };
    // DDP reduces during the stage's last backward pass; with virtual stages no pass covers
    // every chunk, so all run without it and the gradients are averaged after the step. The
    // sharded wrapper reduces, at the end of the last pass, the gradients the earlier passes
    // left in its units too, so it syncs in the last pass either way.
    const bool chunks = settings_.virtual_stages > 1;
    f.around_backward = [&](int, bool last_backward, const std::function<void()>& run) {
      if (last_backward && (!chunks || sdp_)) return run();
      if (sdp_) {
        auto no_sync = sdp_->no_sync();
        return run();
      }
      auto no_sync = ddp_->no_sync();
      run();
    };
    f.activation_shape = [&](int j) { return activation_shape(xs[j].size(0), xs[j]); };
    parallel::pipeline::run_stage(schedule_, pipe_, f, &counters_);
    {
      auto timed = profile::phase(profile::Phase::kOptimizer);
      if (chunks && ddp_ && data_.size() > 1) average_gradients();
      if (hp_.grad_clip > 0) {
        if (sdp_) clip_shards(*sdp_, hp_.grad_clip, &pipe_);
        else clip_replica(hp_.grad_clip, &pipe_);
      }
      optimizer_->step();
    }
    measure_stage();
    step_cpu_s_.push_back(process_cpu_seconds() - cpu0);
    return total;
  }

  double loss_total(const torch::Tensor& loss_sum) override {
    torch::Tensor t = torch::tensor({MeshStrategy::loss_total(loss_sum)}, torch::kDouble);
    pipe_.broadcast(t, pipe_.size() - 1);
    return t.item<double>();
  }

  // The whole model's outputs on every stage: the activations go through the stages, the
  // last one's outputs are broadcast over the pipeline group.
  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    const int s = pipe_.rank(), p = pipe_.size(), V = settings_.virtual_stages * p;
    torch::Tensor out;
    for (int vs = 0; vs < V; ++vs) {  // each virtual stage's owner in turn
      if (vs % p != s) continue;
      torch::Tensor x = inputs;
      if (vs > 0) {
        x = torch::empty(activation_shape(inputs.size(0), inputs), torch::kFloat);
        pipe_.exchange({parallel::TensorP2P::from(x, (vs - 1) % p, (1u << 30) + static_cast<uint32_t>(vs))});
      }
      const auto [first, last] = chunks_[static_cast<size_t>(vs / p)];
      if (sdp_) sdp_->begin_forward();
      out = model_->forward_range(first, last, vs > 0 ? to_compute(x) : x);
      if (sdp_) sdp_->end_forward_without_backward();
      if (vs < V - 1)
        pipe_.exchange({parallel::TensorP2P::to(out.to(torch::kFloat).contiguous(), (vs + 1) % p,
                                                (1u << 30) + static_cast<uint32_t>(vs + 1))});
    }
    model_->train();
    torch::Tensor shape = torch::zeros({4}, torch::kLong);
    if (s == p - 1) {
      out = model_->full_outputs(out).contiguous();
      for (int64_t d = 0; d < std::min<int64_t>(4, out.dim()); ++d) shape[d] = out.size(d);
    }
    pipe_.broadcast(shape, p - 1);
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < 4 && shape[d].item<int64_t>() > 0; ++d) sizes.push_back(shape[d].item<int64_t>());
    if (s != p - 1) out = torch::empty(sizes, torch::kFloat);
    out = out.to(torch::kFloat).contiguous();
    pipe_.broadcast(out, p - 1);
    return out;
  }

  StateBytes state_bytes() override {
    if (sdp_) return {sdp_->shard_bytes(), sdp_->grad_bytes(), optimizer_state_bytes(*optimizer_)};
    return replica_bytes(*ddp_, *optimizer_);
  }

  // Every stage's parameters, on every rank (a collective over the pipeline group).
  std::map<std::string, torch::Tensor> full_parameters() override {
    std::map<std::string, torch::Tensor> local;
    if (sdp_) {
      local = sdp_->full_parameters();
    } else {
      for (const auto& item : model_->named_parameters()) local[item.key()] = item.value().detach().clone();
    }
    local = join_tensor_slices(std::move(local));
    std::map<std::string, torch::Tensor> all;
    for (int s = 0; s < pipe_.size(); ++s) {
      std::string bytes;
      if (s == pipe_.rank()) {
        torch::serialize::OutputArchive archive;
        for (const auto& [name, t] : local) archive.write(name, t);
        std::ostringstream os;
        archive.save_to(os);
        bytes = os.str();
      }
      torch::Tensor size = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong);
      pipe_.broadcast(size, s);
      // Moved as int32 words (the communicator has no byte type).
      const int64_t n = size.item<int64_t>();
      torch::Tensor data = torch::zeros({(n + 3) / 4}, torch::kInt);
      if (s == pipe_.rank()) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
      pipe_.broadcast(data, s);
      torch::serialize::InputArchive in;
      in.load_from(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
      for (const std::string& key : in.keys()) {
        torch::Tensor t;
        in.read(key, t);
        all[key] = t;
      }
    }
    return all;
  }

  std::map<std::string, std::string> state() override {
    if (sdp_)
      return parallel::sharded::save_shards(*sdp_, *optimizer_, hp_.optimizer, replicate_rank_,
                                            tensor_, pipe_.rank());
    return parallel::sharded::save_replica(*model_, *optimizer_, hp_.optimizer, data_rank_, tensor_,
                                           pipe_.rank());
  }
  bool state_copy(std::string* out) override {
    if (sdp_)
      parallel::sharded::copy_part(parallel::sharded::shards_part(*sdp_, *optimizer_, hp_.optimizer,
                                                                  replicate_rank_, tensor_, pipe_.rank()),
                                   out);
    else
      parallel::sharded::copy_part(parallel::sharded::replica_part(*model_, *optimizer_, hp_.optimizer,
                                                                   data_rank_, tensor_, pipe_.rank()),
                                   out);
    return true;
  }
  void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                  const std::string& where) override {
    if (!parallel::sharded::is_sharded_checkpoint(parts))
      throw InvalidArgument("checkpoint " + where +
                            " is in the single-writer form of an earlier heft; a pipelined run "
                            "reads the part-per-rank form only");
    if (sdp_)
      parallel::sharded::load_named_state(*sdp_, *optimizer_, hp_.optimizer,
                                          read_state(parts, where), /*subset=*/true);
    else
      parallel::sharded::load_named_state(*model_, *optimizer_, hp_.optimizer,
                                          read_state(parts, where), /*subset=*/true);
  }

  void save_model(const std::string& dir) override { write_model(full_parameters(), dir); }

  std::string summary() const override {
    char line[320];
    const double idle = counters_.step_seconds > 0
                            ? 1.0 - counters_.busy_seconds / counters_.step_seconds : 0;
    std::snprintf(line, sizeof(line),
                  "pipeline: stage=%d busy_seconds=%.3f forward_seconds=%.3f step_seconds=%.3f "
                  "idle_fraction=%.3f theory=%.3f max_in_flight=%d exchanges=%lld step_cpu_ms=%.2f",
                  pipe_.rank(), counters_.busy_seconds, counters_.forward_seconds,
                  counters_.step_seconds, idle,
                  parallel::pipeline::theoretical_bubble(pipe_.size(), settings_.microbatches, settings_.virtual_stages),
                  counters_.max_in_flight, static_cast<long long>(counters_.exchanges),
                  step_cpu_ms());
    if (!reports_ || measured_s_.empty()) return line;
    const std::string what = measure_steps_ == 1 ? "step 1" : "steps 2-" + std::to_string(measure_steps_);
    std::string table = parallel::pipeline::describe_measured(
        plan_, costs_, pipe_.size(), measured_s_, "median of " + what + " on data rank 0");
    table.pop_back();  // its last line's newline: the caller ends the summary's line
    return line + std::string("\n") + table;
  }

 private:
  torch::Tensor to_compute(const torch::Tensor& x) const {
    return bf16_ && sdp_ ? x.to(torch::kBFloat16) : x;
  }

  // The activation a stage receives for a micro-batch of b samples with inputs like x:
  // (b, T, n_embd) for the GPT.
  std::vector<int64_t> activation_shape(int64_t b, const torch::Tensor& x) const {
    return {b, x.size(1), hp_.n_embd};
  }

  // The plan every rank takes: a given split, an even one, or the automatic one, cut from
  // the profile of the ranks at pipeline 0 and data 0 (all tensor ranks, whose layers run
  // tensor collectives); every other rank waits, so the profile runs on a quiet machine, and
  // takes tensor rank 0's costs (broadcast along each mesh dimension in turn). The same
  // costs give every rank the same split (auto_partition is deterministic).
  parallel::pipeline::Plan make_plan(parallel::DeviceMesh& mesh) {
    const std::vector<std::string> names = model_->layer_names();
    const int n = static_cast<int>(names.size());
    const int V = settings_.virtual_stages * pipe_.size();  // virtual stages in all
    if (V > n)
      throw InvalidArgument(settings_.virtual_stages > 1
                                ? "partitions x virtual_stages: expected at most the model's " +
                                      std::to_string(n) + " layers, found " + std::to_string(V)
                                : "partitions: expected 1 to the model's " + std::to_string(n) +
                                      " layers, found " + std::to_string(V));
    std::vector<int> first(static_cast<size_t>(V));
    costs_.assign(names.size(), {});
    for (size_t i = 0; i < names.size(); ++i) costs_[i].name = names[i];
    if (!settings_.partition_boundaries.empty()) {
      HEFT_CHECK(static_cast<int>(settings_.partition_boundaries.size()) == V - 1,
                 "partition_boundaries unchecked: resolve with Distribution::with_overrides");
      for (int s = 1; s < V; ++s)
        first[static_cast<size_t>(s)] = settings_.partition_boundaries[static_cast<size_t>(s - 1)];
    } else if (settings_.auto_partition) {
      if (mesh.coordinate(parallel::Dim::kPipeline) == 0 && mesh.coordinate(parallel::Dim::kData) == 0)
        costs_ = profile_pipeline_layers(*model_, profile_microbatch(), profile_options_);
      share_costs(mesh);
      first = parallel::pipeline::auto_partition(costs_, V, settings_.memory_weight, kPartitionTolerance).first;
    } else {
      // Evenly by count; the layers the division leaves go to stage default_partition (its
      // first chunk).
      const int extra_at = std::min(settings_.default_partition, V - 1);
      for (int s = 1; s < V; ++s)
        first[static_cast<size_t>(s)] = first[static_cast<size_t>(s - 1)] + n / V +
                                        (s - 1 == extra_at ? n % V : 0);
      for (auto& c : costs_) c = {c.name, 1, 2, 0, 0};
    }
    return parallel::pipeline::manual_partition(costs_, {first.begin() + 1, first.end()},
                                                settings_.memory_weight);
  }

  // How the automatic split's costs were found (empty for a given or even split).
  std::string profile_text() const {
    if (!settings_.partition_boundaries.empty() || !settings_.auto_partition) return "";
    char line[320];
    std::snprintf(line, sizeof(line),
                  "profile: by the ranks at pipeline 0 and data 0 alone, on micro-batches of %lld "
                  "samples, each layer's median CPU time of %d rounds after %d warm-up rounds; splits within "
                  "%.0f%% of the best count as equal (then the fewest activation bytes across the "
                  "cuts, the most even layer counts)",
                  static_cast<long long>(profile_microbatch()), profile_options_.repeats,
                  profile_options_.warmup, kPartitionTolerance * 100);
    return line;
  }

  // The micro-batch the stages will run: this data rank's share over the micro-batches.
  int64_t profile_microbatch() const {
    return std::max<int64_t>(1, hp_.batch_size / std::max(1, data_.size()) / settings_.microbatches);
  }

  // costs_ of the rank at coordinate 0 of every dimension, on every rank: 4 numbers a layer.
  void share_costs(parallel::DeviceMesh& mesh) {
    torch::Tensor t = torch::zeros({static_cast<int64_t>(costs_.size()), 4}, torch::kDouble);
    for (size_t i = 0; i < costs_.size(); ++i) {
      const int64_t r = static_cast<int64_t>(i);
      t[r][0] = costs_[i].forward_s;
      t[r][1] = costs_[i].backward_s;
      t[r][2] = static_cast<double>(costs_[i].param_bytes);
      t[r][3] = static_cast<double>(costs_[i].activation_bytes);
    }
    for (parallel::Dim d : {parallel::Dim::kTensor, parallel::Dim::kData, parallel::Dim::kPipeline})
      if (mesh.size(d) > 1) mesh.group(d).broadcast(t, 0);
    for (size_t i = 0; i < costs_.size(); ++i) {
      const torch::Tensor row = t[static_cast<int64_t>(i)];
      costs_[i].forward_s = row[0].item<double>();
      costs_[i].backward_s = row[1].item<double>();
      costs_[i].param_bytes = static_cast<int64_t>(row[2].item<double>());
      costs_[i].activation_bytes = static_cast<int64_t>(row[3].item<double>());
    }
  }

  // The median CPU milliseconds of a step (step() from start to end: the schedule, the
  // optimizer), steps 3.. when there are more than 2, the summary's step_cpu_ms.
  double step_cpu_ms() const {
    if (step_cpu_s_.empty()) return 0;
    const auto from = step_cpu_s_.begin() + (step_cpu_s_.size() > 2 ? 2 : 0);
    return 1e3 * parallel::pipeline::median(std::vector<double>(from, step_cpu_s_.end()));
  }

  // After each step: this stage's compute time per micro-batch (steps 2.. of the first
  // measure_steps_, or step 1 when the run has one), and at the last of them every stage's
  // median, gathered over the pipeline group (a collective: every stage runs the same steps).
  void measure_stage() {
    ++steps_;
    if (steps_ > measure_steps_) return;
    if (steps_ > 1 || measure_steps_ == 1)
      stage_samples_.insert(stage_samples_.end(), counters_.microbatch_seconds.begin(),
                            counters_.microbatch_seconds.end());
    if (steps_ < measure_steps_) return;
    std::vector<double> mine(static_cast<size_t>(pipe_.size()), 0.0);
    mine[static_cast<size_t>(pipe_.rank())] = parallel::pipeline::median(stage_samples_);
    measured_s_ = pipe_.sum(mine);
  }

  // Every gradient averaged over the data group in one flat allreduce.
  void average_gradients() {
    std::vector<torch::Tensor> grads;
    for (torch::Tensor& p : model_->parameters()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad().reshape({-1}));
    }
    torch::Tensor flat = torch::cat(grads);
    data_.allreduce(flat, comm::ReduceOp::avg);
    int64_t offset = 0;
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model_->parameters()) {
      p.mutable_grad().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }

  const config::ModelParallel settings_;  // the resolved distribution's
  parallel::ProcessGroup& pipe_;
  parallel::pipeline::Schedule schedule_;
  parallel::pipeline::Plan plan_;
  std::vector<parallel::pipeline::LayerCost> costs_;
  int stage_first_ = 0, stage_last_ = 0;
  std::vector<std::pair<int, int>> chunks_;  // this rank's layer ranges, by chunk
  std::unique_ptr<parallel::data::DistributedDataParallel> ddp_;  // or
  std::unique_ptr<parallel::sharded::ShardedDataParallel> sdp_;
  int replicate_rank_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  parallel::pipeline::PipelineCounters counters_;
  const parallel::pipeline::ProfileOptions profile_options_;
  // Steps whose stage times are measured; the last one gathers them.
  const int64_t measure_steps_ = hp_.max_steps > 0 ? std::min<int64_t>(hp_.max_steps, 10) : 10;
  int64_t steps_ = 0;
  std::vector<double> stage_samples_;  // this stage's seconds per micro-batch
  std::vector<double> measured_s_;     // every stage's median, once gathered
  std::vector<double> step_cpu_s_;     // each step's process CPU seconds (step() to its end)
};

}  // namespace

std::unique_ptr<Strategy> make_pipeline_strategy(const Hyperparameters& hp,
                                                 const config::ModelParallel& settings,
                                                 parallel::DeviceMesh& mesh,
                                                 std::shared_ptr<Model> model,
                                                 const OptimizerConfig& optimizer) {
  return std::make_unique<Pipelined>(hp, settings, mesh, std::move(model), optimizer);
}

std::vector<parallel::pipeline::LayerCost> profile_pipeline_layers(
    Model& model, int64_t microbatch, const parallel::pipeline::ProfileOptions& options) {
  const std::vector<std::string> names = model.layer_names();
  std::vector<parallel::pipeline::LayerCost> out(names.size());
  for (size_t i = 0; i < names.size(); ++i) out[i].name = names[i];
  // The sample comes from the global generator: its state is put back, so that profiling
  // on some ranks only leaves every rank's random stream as it was.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  const torch::Tensor input = model.sample_input(microbatch);
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  if (!input.defined()) return out;
  // Each layer's input: the previous layer's output (layer i reads inputs[i]).
  std::vector<torch::Tensor> inputs{input};
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i + 1 < names.size(); ++i)
      inputs.push_back(model.forward_range(static_cast<int>(i), static_cast<int>(i), inputs.back()));
  }
  // CPU time (process_cpu_seconds), not wall time: waiting for a core would move the split.
  const auto cpu_seconds = process_cpu_seconds;
  std::vector<int64_t> activation_bytes(names.size(), 0);
  parallel::pipeline::profile_layers(out, options, [&](int i, double* forward_s, double* backward_s) {
    const torch::Tensor& x = inputs[static_cast<size_t>(i)];
    const torch::Tensor in = x.is_floating_point() ? x.detach().requires_grad_(true) : x;
    const double t0 = cpu_seconds();
    const torch::Tensor y = model.forward_range(i, i, in);
    const double t1 = cpu_seconds();
    y.backward(torch::ones_like(y));
    const double t2 = cpu_seconds();
    *forward_s = t1 - t0;
    *backward_s = t2 - t1;
    activation_bytes[static_cast<size_t>(i)] = bytes_of(y);
  });
  // The gradients accumulate over the rounds, as over a step's micro-batches (a reset each
  // round would time allocating them instead).
  for (size_t i = 0; i < names.size(); ++i) {
    for (const torch::Tensor& p : model.layer_parameters(static_cast<int>(i))) p.mutable_grad().reset();
    out[i].activation_bytes = activation_bytes[i];
    for (const torch::Tensor& p : model.layer_parameters(static_cast<int>(i))) out[i].param_bytes += bytes_of(p);
  }
  return out;
}

}  // namespace heft::train
