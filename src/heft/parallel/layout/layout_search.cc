#include "heft/parallel/layout/layout_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "heft/error.h"
#include "heft/parallel/pipeline/schedule.h"

namespace heft::parallel::layout {

const char* to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kP2P: return "p2p";
  }
  return "?";
}

double CommTable::seconds(Collective c, int group, int64_t bytes) const {
  if (group <= 1 || bytes <= 0) return 0;
  const CollectiveCost* above = nullptr;
  const CollectiveCost* below = nullptr;
  for (const CollectiveCost& e : entries) {
    if (e.collective != c) continue;
    if (e.group >= group && (!above || e.group < above->group)) above = &e;
    if (e.group < group && (!below || e.group > below->group)) below = &e;
  }
  const CollectiveCost* e = above ? above : below;
  if (!e) throw InvalidArgument(std::string("comm_table: expected an entry for ") + to_string(c) + ", found none");
  return e->alpha_s + static_cast<double>(bytes) / e->beta_bytes_per_s;
}

double sync_seconds(const std::vector<SyncDelay>& delays, int group) {
  if (group <= 1) return 0;
  const SyncDelay* above = nullptr;
  const SyncDelay* below = nullptr;
  for (const SyncDelay& d : delays) {
    if (d.group >= group && (!above || d.group < above->group)) above = &d;
    if (d.group < group && (!below || d.group > below->group)) below = &d;
  }
  const SyncDelay* d = above ? above : below;
  return d ? d->seconds : 0;
}

std::string to_string(const Layout& l) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "data %d x sharded %d x tensor %d x pipeline %d, m %d, v %d, ckpt %s", l.data,
                l.sharded, l.tensor, l.pipeline, l.microbatches, l.virtual_stages,
                l.checkpointing ? l.checkpoint_placement.c_str() : "off");
  return buf;
}

std::string format_bytes(int64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

namespace {

// One chunk's (P x v of them) costs per micro-batch, on one rank of its tensor group.
struct Chunk {
  double forward_s = 0, backward_s = 0;
  double tensor_comm_s = 0;       // forward + backward
  int64_t param_bytes = 0;        // / T
  int64_t largest_layer = 0;      // / T
  int64_t largest_tensor = 0;     // one parameter tensor, / T
  int64_t saved_bytes = 0;        // full activations of one micro-batch / T
  int64_t input_bytes = 0;        // what a checkpointed micro-batch keeps: each layer's input
  int64_t largest_saved = 0;      // one layer's full activations (recomputed one at a time)
  int tensor_syncs = 0;           // tensor all-reduces a micro-batch waits on (T > 1)
  int p2p_syncs = 0;              // p2p a micro-batch waits on: 2 per neighbouring chunk
};

int64_t scaled(double bytes) { return static_cast<int64_t>(std::llround(bytes)); }

void check_layout(const ModelCost& model, const SearchOptions& o, const Layout& l) {
  const int n = static_cast<int>(model.layers.size());
  if (l.data < 1 || l.sharded < 1 || l.tensor < 1 || l.pipeline < 1 ||
      l.data * l.sharded * l.tensor * l.pipeline != o.world)
    throw InvalidArgument("layout: expected data x sharded x tensor x pipeline = world " + std::to_string(o.world) +
                          ", found " + to_string(l));
  if (!model.largest_tensor_bytes.empty() && model.largest_tensor_bytes.size() != static_cast<size_t>(n))
    throw InvalidArgument("largest_tensor_bytes: expected one per layer (" + std::to_string(n) + ") or none, found " +
                          std::to_string(model.largest_tensor_bytes.size()));
  if (model.heads > 0 && model.heads % l.tensor != 0)
    throw InvalidArgument("tensor " + std::to_string(l.tensor) + " does not divide heads " +
                          std::to_string(model.heads));
  if (o.tensor_splits > 0 && o.tensor_splits % l.tensor != 0)
    throw InvalidArgument("tensor " + std::to_string(l.tensor) + ": " +
                          (o.tensor_splits == 1 ? std::string("the model has no tensor plan")
                                                : "its tensor plan splits by divisors of " +
                                                      std::to_string(o.tensor_splits) + " only"));
  if (l.pipeline * l.virtual_stages > n)
    throw InvalidArgument("pipeline " + std::to_string(l.pipeline) + " x virtual stages " +
                          std::to_string(l.virtual_stages) + " exceeds the model's " + std::to_string(n) + " layers");
  if (l.virtual_stages > 1 && l.pipeline == 1)
    throw InvalidArgument("virtual stages " + std::to_string(l.virtual_stages) + " need a pipeline");
  const int replicas = l.data * l.sharded;
  if (o.global_batch % replicas != 0)
    throw InvalidArgument("data x sharded " + std::to_string(replicas) + " does not divide global batch " +
                          std::to_string(o.global_batch));
  if (l.microbatches < 1 || (o.global_batch / replicas) % l.microbatches != 0)
    throw InvalidArgument("micro-batches " + std::to_string(l.microbatches) + " do not divide the batch per replica " +
                          std::to_string(o.global_batch / replicas));
  if (l.virtual_stages > 1 && l.microbatches % l.pipeline != 0)
    throw InvalidArgument("virtual stages need micro-batches a multiple of pipeline " + std::to_string(l.pipeline) +
                          ", found " + std::to_string(l.microbatches));
}

std::vector<Chunk> chunks_of(const ModelCost& model, const CommTable& comm, const Layout& l,
                             const std::vector<int>& first, double scale, double inflation) {
  const int n = static_cast<int>(model.layers.size());
  const int count = static_cast<int>(first.size());
  const double t = l.tensor;
  const int half = model.tensor_allreduces_per_layer;
  std::vector<Chunk> out(static_cast<size_t>(count));
  for (int c = 0; c < count; ++c) {
    Chunk& ch = out[static_cast<size_t>(c)];
    const int begin = first[static_cast<size_t>(c)];
    const int end = c + 1 < count ? first[static_cast<size_t>(c) + 1] : n;
    double f = 0, b = 0, tc = 0, saved = 0, params = 0, largest = 0, inputs = 0, one = 0, tensor = 0;
    for (int i = begin; i < end; ++i) {
      const pipeline::LayerCost& layer = model.layers[static_cast<size_t>(i)];
      const double act = static_cast<double>(layer.activation_bytes) * scale;
      const double ff = model.forward_fixed_s.empty() ? 0 : model.forward_fixed_s[static_cast<size_t>(i)];
      const double bf = model.backward_fixed_s.empty() ? 0 : model.backward_fixed_s[static_cast<size_t>(i)];
      f += (ff + (layer.forward_s - ff) * scale) * inflation / t;
      b += (bf + (layer.backward_s - bf) * scale) * inflation / t;
      if (l.tensor > 1) ch.tensor_syncs += half;
      // The all-reduced tensor is the hidden state: the smaller of the layer's input and
      // output (a vocabulary-parallel head reduces its input's gradient, not the logits).
      const double in_act =
          i > 0 ? static_cast<double>(model.layers[static_cast<size_t>(i) - 1].activation_bytes) * scale : act;
      tc += half * comm.seconds(Collective::kAllReduce, l.tensor, scaled(std::min(act, in_act)));
      const double kept = model.saved_bytes.empty()
                              ? model.saved_activation_factor * act
                              : static_cast<double>(model.saved_bytes[static_cast<size_t>(i)]) * scale;
      saved += kept / t;
      one = std::max(one, kept / t);
      if (i > 0) inputs += static_cast<double>(model.layers[static_cast<size_t>(i) - 1].activation_bytes) * scale;
      params += static_cast<double>(layer.param_bytes) / t;
      largest = std::max(largest, static_cast<double>(layer.param_bytes) / t);
      const int64_t biggest = model.largest_tensor_bytes.empty() ? layer.param_bytes
                                                                 : model.largest_tensor_bytes[static_cast<size_t>(i)];
      tensor = std::max(tensor, static_cast<double>(biggest) / t);
    }
    ch.tensor_comm_s = tc;
    ch.forward_s = f + tc / 2;
    ch.backward_s = b + tc / 2 + (l.checkpointing ? ch.forward_s : 0);
    ch.param_bytes = scaled(params);
    ch.largest_layer = scaled(largest);
    ch.largest_tensor = scaled(tensor);
    ch.saved_bytes = scaled(saved);
    ch.input_bytes = scaled(inputs);
    ch.largest_saved = scaled(one);
    if (begin > 0) {  // its input's gradient
      const double in = static_cast<double>(model.layers[static_cast<size_t>(begin) - 1].activation_bytes) * scale;
      ch.backward_s += comm.seconds(Collective::kP2P, 2, scaled(in));
      ch.p2p_syncs += 2;
    }
    if (c + 1 < count) {
      const double out_bytes = static_cast<double>(model.layers[static_cast<size_t>(end) - 1].activation_bytes) * scale;
      ch.forward_s += comm.seconds(Collective::kP2P, 2, scaled(out_bytes));
      ch.p2p_syncs += 2;
    }
  }
  return out;
}

// The makespan of m micro-batches on the stages (1F1B, interleaved for v > 1), with the
// simulator's in-flight counts and bubble.
pipeline::Simulation run_pipeline(const Layout& l, const std::vector<double>& f, const std::vector<double>& b) {
  double unit = 0;
  for (size_t s = 0; s < f.size(); ++s) unit = std::max({unit, f[s], b[s]});
  if (unit <= 0) unit = 1;
  std::vector<double> fn(f), bn(b);  // the simulator's grid has unit slots: costs <= 1
  for (size_t s = 0; s < f.size(); ++s) fn[s] = std::max(f[s] / unit, 1e-9), bn[s] = std::max(b[s] / unit, 1e-9);
  pipeline::Schedule sc = pipeline::make_schedule("interleaved", l.pipeline, l.microbatches, 0, l.virtual_stages);
  pipeline::Simulation sim = pipeline::simulate(sc, fn, bn);
  if (!sim.ok) throw InvalidArgument("pipeline schedule: " + sim.error);
  sim.makespan *= unit;
  return sim;
}

// Sharded: each of the stage's `units` layers gathers and reduce-scatters its own parameters
// (one collective each: units x the latency, the bytes once).
// *sync: the synchronisation delays of these collectives (SearchOptions::host_sync), in the
// total and never hideable (a peer's lateness shows at the wait).
double gradient_comm(const CommTable& comm, const SearchOptions& o, const Layout& l, int64_t g, int units,
                     double* hideable, double* sync) {
  double t = 0;
  *hideable = 0;
  *sync = 0;
  if (l.sharded == 1) {
    t = comm.seconds(Collective::kAllReduce, l.data, g);
    *hideable = t;
    if (l.data > 1 && g > 0) {
      const int64_t later = std::max<int64_t>(0, g - o.first_bucket_bytes), size = std::max<int64_t>(1, o.bucket_bytes);
      const int64_t buckets = 1 + (later + size - 1) / size;
      *sync = static_cast<double>(buckets) * sync_seconds(o.host_sync, l.data);
    }
    return t + *sync;
  }
  *sync = (2.0 * l.microbatches + 1) * units * sync_seconds(o.host_sync, l.sharded) +
          sync_seconds(o.host_sync, l.data);
  const double more = std::max(0, units - 1);
  const double gathers = 2.0 * l.microbatches *
                         (comm.seconds(Collective::kAllGather, l.sharded, g) +
                          more * comm.seconds(Collective::kAllGather, l.sharded, 1));
  const double rs = comm.seconds(Collective::kReduceScatter, l.sharded, g) +
                    more * comm.seconds(Collective::kReduceScatter, l.sharded, 1);
  const double ar = comm.seconds(Collective::kAllReduce, l.data, g / l.sharded);
  *hideable = rs + ar;
  return gathers + rs + ar + *sync;
}

// The step's critical path waits at each synchronisation point of its busiest stage, m
// times, and the pipeline's fill and drain cross every stage boundary once more each way.
double path_sync_s(const SearchOptions& o, const Layout& l, const std::vector<int>& tensor_syncs,
                   const std::vector<int>& p2p_syncs) {
  const double tensor_sync = sync_seconds(o.host_sync, l.tensor), pair_sync = sync_seconds(o.host_sync, 2);
  double path = 0;
  for (size_t i = 0; i < tensor_syncs.size(); ++i)
    path = std::max(path, l.microbatches * (tensor_syncs[i] * tensor_sync + p2p_syncs[i] * pair_sync));
  return path + 2.0 * (l.pipeline - 1) * pair_sync;
}

}  // namespace

Prediction evaluate(const ModelCost& model, const CommTable& comm, const SearchOptions& o, const Layout& l) {
  check_layout(model, o, l);
  const int P = l.pipeline, v = l.virtual_stages, pv = P * v;
  const int per_micro = o.global_batch / (l.data * l.sharded) / l.microbatches;
  const double scale = static_cast<double>(per_micro) / model.profiled_batch;
  Prediction pr;
  pr.layout = l;
  pr.stage_first = pv == 1 ? std::vector<int>{0} : pipeline::auto_partition(model.layers, pv, o.memory_weight).first;
  const std::vector<Chunk> ch = chunks_of(model, comm, l, pr.stage_first, scale, o.host_compute_inflation);

  // Per stage: its chunks s, s + P, ...
  std::vector<double> f(static_cast<size_t>(P)), b(static_cast<size_t>(P)), tc(static_cast<size_t>(P));
  std::vector<int> tensor_syncs(static_cast<size_t>(P)), p2p_syncs(static_cast<size_t>(P));
  std::vector<int64_t> params(static_cast<size_t>(P)), largest(static_cast<size_t>(P)), saved(static_cast<size_t>(P)),
      inputs(static_cast<size_t>(P)), chunk_max(static_cast<size_t>(P)), tensor_max(static_cast<size_t>(P));
  for (int c = 0; c < pv; ++c) {
    const size_t s = static_cast<size_t>(c % P);
    const Chunk& k = ch[static_cast<size_t>(c)];
    f[s] += k.forward_s / v;
    b[s] += k.backward_s / v;
    tc[s] += k.tensor_comm_s;
    tensor_syncs[s] += k.tensor_syncs;
    p2p_syncs[s] += k.p2p_syncs;
    params[s] += k.param_bytes;
    largest[s] = std::max(largest[s], k.largest_layer);
    saved[s] += k.saved_bytes;
    inputs[s] += k.input_bytes;
    chunk_max[s] = std::max(chunk_max[s], k.largest_saved);
    tensor_max[s] = std::max(tensor_max[s], k.largest_tensor);
  }
  std::vector<int> in_flight(static_cast<size_t>(P), 1);
  if (P == 1) {
    pr.compute_s = l.microbatches * (f[0] + b[0]);
  } else {
    const pipeline::Simulation sim = run_pipeline(l, f, b);
    pr.compute_s = sim.makespan;
    pr.bubble = sim.bubble;
    in_flight = sim.max_in_flight;
  }

  // The allocator's slack per byte of activations, from one process's measured step at the
  // profiled batch (ModelCost::step_peak_bytes; 0 when not measured).
  double slack_per_saved = 0;
  if (model.step_peak_bytes > 0) {
    double saved_all = 0, params_all = 0;
    int64_t largest_all = 0;
    for (size_t i = 0; i < model.layers.size(); ++i) {
      const pipeline::LayerCost& layer = model.layers[i];
      saved_all += model.saved_bytes.empty() ? model.saved_activation_factor * static_cast<double>(layer.activation_bytes)
                                             : static_cast<double>(model.saved_bytes[i]);
      params_all += static_cast<double>(layer.param_bytes);
      largest_all = std::max(largest_all, model.largest_tensor_bytes.empty() ? layer.param_bytes
                                                                             : model.largest_tensor_bytes[i]);
    }
    // The probe's steps held the gradients, the optimizer's state and its step's temporaries too.
    const double counted = saved_all + (1 + model.optimizer_bytes_per_param_byte) * params_all +
                           static_cast<double>(model.transient_bytes) * (1 + model.transient_retention) +
                           (model.backward_tensor_copies + model.step_tensor_copies) * static_cast<double>(largest_all);
    if (saved_all > 0) slack_per_saved = std::max(0.0, static_cast<double>(model.step_peak_bytes) - counted) / saved_all;
  }

  int64_t g = 0;
  size_t shown_stage = 0;  // the stage the prediction's memory and tensor comm are of
  for (int s = 0; s < P; ++s) {
    const size_t i = static_cast<size_t>(s);
    g = std::max(g, params[i]);
    const double opt = model.optimizer_bytes_per_param_byte;
    const double copies = l.data > 1 ? model.replica_gradient_copies : 0;
    // Sharded: the shards, two gathered layers, and the full-size gradients the backward
    // produces before their reduce-scatters (ModelCost::sharded_gradient_copies of them),
    // plus the replicas' shard all-reduce buffer (copies / S).
    const double p_i = static_cast<double>(params[i]);
    const int64_t state =
        l.sharded == 1 ? scaled((2.0 + opt + copies) * p_i)
                       : scaled((2.0 + opt + copies) * p_i / l.sharded + model.sharded_gradient_copies * p_i) +
                             2 * largest[i];
    // The backward's peak: the saved activations, the last stage's transient (with what the
    // allocator keeps of it) and the fresh gradients; after it, the norm's and optimizer's.
    const int64_t transient =
        s + 1 == P ? scaled(static_cast<double>(model.transient_bytes) * scale / l.tensor *
                            (1 + model.transient_retention))
                   : 0;
    const int64_t saved_here = l.checkpointing ? in_flight[i] * inputs[i] / v + chunk_max[i]
                                               : in_flight[i] * saved[i] / v;
    const int64_t backward_temporaries = scaled(model.backward_tensor_copies * static_cast<double>(tensor_max[i]));
    const int64_t act = saved_here + transient + backward_temporaries;
    const double step_tensor = l.sharded == 1 ? static_cast<double>(tensor_max[i])
                                              : static_cast<double>(largest[i]) / l.sharded;
    const int64_t step = scaled(model.step_tensor_copies * step_tensor);
    // Both phases count: the step's temporaries (double precision, twice a gradient's size) do
    // not fit the holes the backward's freed blocks leave, and malloc keeps those.
    const int64_t runtime = model.fixed_bytes + model.profile_residue_bytes + model.run_bytes +
                            (l.data * l.sharded > 1 ? model.replica_group_bytes : 0);
    const int64_t slack = scaled(slack_per_saved * static_cast<double>(saved_here));
    const int64_t memory = std::max(state + act + step + runtime + slack, model.profile_peak_bytes);
    pr.unprofiled_memory_bytes =
        std::max(pr.unprofiled_memory_bytes, state + act + step + runtime + slack - model.profile_residue_bytes);
    if (memory > pr.memory_bytes || s == 0) {
      pr.memory_bytes = memory;
      pr.state_bytes = state;
      pr.activation_bytes = act;
      pr.step_bytes = step;
      // The same terms by component (the state's rounding goes to gradient_buffers).
      const double share = l.sharded == 1 ? p_i : p_i / l.sharded;
      const int64_t param_part = scaled(share), opt_part = scaled(opt * share);
      const int64_t gathered = l.sharded == 1 ? 0 : 2 * largest[i];
      pr.memory_parts = {{"parameters", param_part},
                         {"gradients", param_part},
                         {"optimizer_state", opt_part},
                         {"gradient_buffers", state - 2 * param_part - opt_part - gathered},
                         {"gathered_parameters", gathered},
                         {"activations", saved_here},
                         {"loss_transient", transient},
                         {"backward_temporaries", backward_temporaries},
                         {"step_temporaries", step},
                         {"runtime", runtime},
                         {"allocator_slack", slack},
                         {"profile_floor", memory - (state + act + step + runtime + slack)}};
      pr.max_in_flight = in_flight[i];
      pr.tensor_comm_s = tc[i] * l.microbatches;
      shown_stage = i;
    }
  }
  if (model.optimizer_s > 0) {
    double all = 0;
    for (const pipeline::LayerCost& layer : model.layers) all += static_cast<double>(layer.param_bytes);
    if (all > 0)
      pr.compute_s += model.optimizer_s * o.host_step_inflation * static_cast<double>(g) / all / l.sharded;
  }
  // The host's cores shared: the ranks that are busy (all but the pipeline's idle share) and
  // the host's other load.
  double contention = 1;
  if (o.host_cores > 0)
    contention = std::max(1.0, (o.host_threads * (1 - pr.bubble) + o.host_load) / o.host_cores);
  pr.compute_s *= contention;
  double hideable = 0;
  int units = 0;  // layers of the largest stage
  for (int c = 0; c < pv; ++c) {
    const int first = pr.stage_first[static_cast<size_t>(c)];
    const int end = c + 1 < pv ? pr.stage_first[static_cast<size_t>(c) + 1] : static_cast<int>(model.layers.size());
    units = std::max(units, end - first);
  }
  double gradient_sync = 0;
  pr.gradient_comm_s = gradient_comm(comm, o, l, g, units * v, &hideable, &gradient_sync);
  double hidden = 0;
  if (o.overlap_gradients) {
    double last_backward = 0;
    for (double x : b) last_backward = std::max(last_backward, x * v * contention);
    hidden = std::min(hideable, last_backward);
    if (o.overlap_needs_idle_cores && o.host_cores > 0)
      hidden *= std::max(0.0, 1 - (o.host_threads * (1 - pr.bubble) + o.host_load) / o.host_cores);
  }
  const double path_sync = path_sync_s(o, l, tensor_syncs, p2p_syncs);
  pr.sync_s = path_sync + gradient_sync;
  pr.tensor_comm_s += l.microbatches * tensor_syncs[shown_stage] * sync_seconds(o.host_sync, l.tensor);
  pr.step_s = pr.compute_s + path_sync + pr.gradient_comm_s - hidden;
  return pr;
}

}  // namespace heft::parallel::layout
