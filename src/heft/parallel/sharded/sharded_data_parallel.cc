// Terms as in the header: unit, flat parameter (Flat), shard, slot (one parameter with its
// place), pass (one backward, from its first gradient hook to the engine callback).
#include "heft/parallel/sharded/sharded_data_parallel.h"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "heft/check.h"
#include "heft/error.h"
#include "heft/parallel/recompute.h"

namespace heft::parallel::sharded {

namespace {

// Row-major alias of full[offset, offset + numel) shaped `shape` (shares full's storage).
torch::Tensor alias(const torch::Tensor& full, int64_t offset, at::IntArrayRef shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * std::max<int64_t>(shape[d + 1], 1);
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::empty({0}, full.options());
  a.set_(full.storage(), full.storage_offset() + offset, shape, strides);
  return a;
}

size_t bytes_of(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

}  // namespace

ShardedDataParallel::ShardedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                         std::vector<std::shared_ptr<torch::nn::Module>> units,
                                         ProcessGroup& shard, ProcessGroup* replicate,
                                         ShardedOptions options)
    : module_(std::move(module)), shard_(shard), replicate_(replicate), options_(std::move(options)) {
  if (!module_) throw InvalidArgument("ShardedDataParallel: module is null");
  if (replicate_ && replicate_->size() == 1) replicate_ = nullptr;
  if (!options_.group_of) options_.group_of = [](const std::string&, const torch::Tensor&) { return 0; };
  EngineOptions engine;
  engine.compute_dtype = options_.compute_dtype;
  engine_ = std::make_unique<FlatEngine>(&shard_, replicate_, engine);
  build(units);
}

ShardedDataParallel::~ShardedDataParallel() {
  for (Slot& s : slots_) s.hook.reset();
}

namespace {

// Which unit each parameter belongs to (by TensorImpl); a parameter of no unit is the
// root's. Throws heft::InvalidArgument for overlapping units or a unit outside `module`.
std::map<const void*, int> unit_of_parameters(
    const torch::nn::Module& module, const std::vector<std::shared_ptr<torch::nn::Module>>& units) {
  std::map<const void*, int> unit_of;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u]) continue;  // a unit this rank does not hold (a pipeline stage's model)
    for (const torch::Tensor& p : units[u]->parameters()) {
      const void* key = p.unsafeGetTensorImpl();
      if (unit_of.count(key))
        throw InvalidArgument("ShardedDataParallel: units " + std::to_string(unit_of[key]) +
                              " and " + std::to_string(u) + " share a parameter; units must be disjoint");
      unit_of[key] = static_cast<int>(u);
    }
  }
  std::set<const void*> in_module;
  for (const auto& item : module.named_parameters()) in_module.insert(item.value().unsafeGetTensorImpl());
  for (const auto& [key, u] : unit_of)
    if (!in_module.count(key))
      throw InvalidArgument("ShardedDataParallel: unit " + std::to_string(u) +
                            " has parameters that are not the module's; units must be sub-modules "
                            "of the module");
  return unit_of;
}

}  // namespace

void ShardedDataParallel::build(const std::vector<std::shared_ptr<torch::nn::Module>>& units) {
  make_flats(unit_of_parameters(*module_, units), static_cast<int>(units.size()));
  check_same_layout();
  shard_flats();
  hook_slots();
}

// Flats: per unit, per group, members in registration order; the root unit (index `root`)
// takes the parameters of no unit.
void ShardedDataParallel::make_flats(const std::map<const void*, int>& unit_of, int root) {
  units_.assign(static_cast<size_t>(root) + 1, Unit{});
  std::map<std::pair<int, int>, int> flat_of;  // (unit, group) -> flat
  std::vector<std::pair<int, std::pair<std::string, torch::Tensor>>> order;  // flat, param
  for (const auto& item : module_->named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    if (!p.device().is_cpu() || p.is_sparse() || !p.is_floating_point())
      throw InvalidArgument("ShardedDataParallel: parameter " + item.key() +
                            " is not a dense floating CPU tensor");
    const auto it = unit_of.find(p.unsafeGetTensorImpl());
    const int u = it == unit_of.end() ? root : it->second;
    const int g = options_.group_of(item.key(), p);
    flat_of.emplace(std::make_pair(u, g), 0);
    order.push_back({u * 1000003 + g, {item.key(), p}});
  }
  // Number flats by (unit, group).
  int next = 0;
  for (auto& [key, index] : flat_of) index = next++;
  flats_.resize(flat_of.size());
  for (const auto& [key, index] : flat_of) {
    flats_[index].info.unit = key.first;
    flats_[index].info.group = key.second;
    units_[key.first].flats.push_back(index);
  }
  for (const auto& entry : order) {
    const int u = entry.first / 1000003, g = entry.first % 1000003;
    Flat& flat = flats_[flat_of.at({u, g})];
    const torch::Tensor& p = entry.second.second;
    FlatMember m;
    m.name = entry.second.first;
    m.shape = p.sizes().vec();
    m.offset = flat.info.numel;
    m.numel = p.numel();
    flat.info.numel += m.numel;
    flat.info.members.push_back(m);
    flat.params.push_back(p);
  }
}

// Every rank must have the same layout: compare a hash through min and max.
void ShardedDataParallel::check_same_layout() {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const Flat& f : flats_)
    for (const FlatMember& m : f.info.members) {
      for (char c : m.name) mix(static_cast<unsigned char>(c));
      for (int64_t d : m.shape) mix(static_cast<uint64_t>(d));
    }
  for (ProcessGroup* g : {&shard_, replicate_}) {
    if (!g || g->size() == 1) continue;
    torch::Tensor lo = torch::tensor({static_cast<int64_t>(h & 0x7fffffffffffffffull)}, torch::kLong);
    torch::Tensor hi = lo.clone();
    g->allreduce(lo, comm::ReduceOp::min);
    g->allreduce(hi, comm::ReduceOp::max);
    if (!torch::equal(lo, hi))
      throw InvalidArgument("ShardedDataParallel: the ranks' modules differ (names or shapes of "
                            "parameters); every rank must build the same model");
  }
}

// Full values from rank 0 of the shard and replicate groups; this rank's shard (the
// engine's flat of the same index); the module's parameters become aliases of the (then
// freed) full buffer.
void ShardedDataParallel::shard_flats() {
  torch::NoGradGuard no_grad;
  for (Flat& flat : flats_) {
    std::vector<torch::Tensor> values;
    for (size_t i = 0; i < flat.params.size(); ++i) {
      if (flat.params[i].scalar_type() != torch::kFloat)
        throw InvalidArgument("ShardedDataParallel: parameter " + flat.info.members[i].name +
                              " is " + std::string(c10::toString(flat.params[i].scalar_type())) +
                              "; the shards are float32 master weights: build the model in float32 "
                              "(compute_dtype sets what forward computes in)");
      values.push_back(flat.params[i].detach().reshape({-1}));
    }
    torch::Tensor shard = engine_->shard_of_first_rank(torch::cat(values));
    shard.set_requires_grad(true);
    const int f = engine_->add_flat(shard, flat.info.numel);
    flat.info.shard_numel = shard.numel();
    shards_.push_back(shard);
    const torch::Tensor& full = engine_->full(f);
    for (size_t i = 0; i < flat.params.size(); ++i)
      flat.params[i].set_data(alias(full, flat.info.members[i].offset, flat.info.members[i].shape));
    infos_.push_back(flat.info);
  }
  for (const Unit& u : units_) engine_->add_unit(u.flats);
}

// One slot per parameter, each with its gradient hook.
void ShardedDataParallel::hook_slots() {
  for (size_t f = 0; f < flats_.size(); ++f)
    for (size_t i = 0; i < flats_[f].params.size(); ++i) {
      Slot s;
      s.flat = static_cast<int>(f);
      s.member = static_cast<int>(i);
      s.unit = flats_[f].info.unit;
      slots_.push_back(std::move(s));
    }
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const int slot = static_cast<int>(i);
    s.hook = GradientHookHandle(flats_[s.flat].params[s.member], [this, slot] { on_gradient(slot); });
    HEFT_CHECK(static_cast<bool>(s.hook), "parameter without a gradient accumulator");
  }
}

void ShardedDataParallel::begin_forward() {
  const int root = static_cast<int>(units_.size()) - 1;
  engine_->gather(root, false);
  engine_->wait_gathered(root);
}

torch::Tensor ShardedDataParallel::run_unit(
    size_t i, const torch::Tensor& x, const std::function<torch::Tensor(const torch::Tensor&)>& f) {
  const int unit = static_cast<int>(i);
  const int units = static_cast<int>(units_.size()) - 1;
  HEFT_CHECK(unit < units, "run_unit: unit ", unit, " of ", units);
  engine_->gather(unit, false);
  engine_->wait_gathered(unit);
  if (options_.prefetch && unit + 1 < units) engine_->gather(unit + 1, true);
  const bool grad = torch::GradMode::is_enabled();
  torch::Tensor out;
  if (grad && options_.activation_checkpointing) {
    std::vector<torch::Tensor> params;
    for (int fl : units_[unit].flats)
      params.insert(params.end(), flats_[fl].params.begin(), flats_[fl].params.end());
    out = recompute_in_backward(x, f, params);
  } else {
    out = f(x);
  }
  if (!grad) {  // evaluation: nothing comes back for this unit
    engine_->release(unit);
    return out;
  }
  if (options_.reshard_after_forward) engine_->release(unit);
  if (out.requires_grad()) {
    out.register_hook([this, unit](const torch::Tensor& g) {
      engine_->gather(unit, false);
      engine_->wait_gathered(unit);
      if (options_.prefetch && unit > 0) engine_->gather(unit - 1, true);
      return g;
    });
  }
  return out;
}

void ShardedDataParallel::end_forward_without_backward() {
  for (size_t u = 0; u < units_.size(); ++u) engine_->release(static_cast<int>(u));
}

void ShardedDataParallel::start_pass() {
  in_pass_ = true;
  for (Unit& u : units_) {
    u.pending = 0;
    u.reduced = false;
    for (int f : u.flats) u.pending += static_cast<int>(flats_[f].params.size());
  }
  for (Slot& s : slots_) s.unit = flats_[s.flat].info.unit;
  ready_.assign(slots_.size(), 0);
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
}

void ShardedDataParallel::on_gradient(int slot) {
  if (!in_pass_) start_pass();
  Slot& s = slots_[slot];
  if (ready_[slot]) return;  // counted once per pass
  ready_[slot] = 1;
  Flat& flat = flats_[s.flat];
  torch::Tensor& param = flat.params[s.member];
  const FlatMember& m = flat.info.members[s.member];
  {
    torch::NoGradGuard no_grad;
    if (!flat.grad_full.defined())
      flat.grad_full = torch::zeros({engine_->padded(s.flat)}, torch::kFloat);
    const torch::Tensor& g = param.grad();
    if (g.defined()) flat.grad_full.narrow(0, m.offset, m.numel).add_(g.reshape({-1}));
    param.mutable_grad().reset();
  }
  if (--units_[s.unit].pending == 0) unit_gradients_ready(s.unit);
}

void ShardedDataParallel::unit_gradients_ready(int unit) {
  Unit& u = units_[unit];
  u.reduced = true;
  if (sync_) {
    for (int f : u.flats) {
      engine_->reduce(f, flats_[f].grad_full);  // the reduction keeps it until done
      flats_[f].grad_full = torch::Tensor();
    }
  }
  // Inside no_sync the root stays gathered: other micro-batches' backward passes (a
  // pipeline's) still need it, and it has no hook to gather it again.
  if (sync_ || unit != static_cast<int>(units_.size()) - 1) engine_->release(unit);
}

void ShardedDataParallel::finish_backward() {
  // Parameters the pass did not reach: their gradient as it is (zeros when none).
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (ready_[i]) continue;
    on_gradient(static_cast<int>(i));
  }
  in_pass_ = false;
  std::exception_ptr error;
  if (sync_) {
    // This pass's gradient replaces the shards' (heft-train's strategies clear no grads).
    for (torch::Tensor& shard : shards_) shard.mutable_grad().reset();
    try {
      engine_->finish_reductions();
    } catch (...) {
      error = std::current_exception();
    }
  }
  for (size_t u = 0; u < units_.size(); ++u)
    if (sync_ || u + 1 < units_.size()) engine_->release(static_cast<int>(u));
  if (error) std::rethrow_exception(error);
}

void ShardedDataParallel::scale_grads(double factor) { engine_->scale_grads(factor); }

std::map<std::string, torch::Tensor> ShardedDataParallel::full_parameters() {
  std::map<std::string, torch::Tensor> out;
  torch::NoGradGuard no_grad;
  for (size_t f = 0; f < flats_.size(); ++f) {
    const torch::Tensor full = engine_->full_values(static_cast<int>(f));
    for (const FlatMember& m : flats_[f].info.members)
      out[m.name] = full.narrow(0, m.offset, m.numel).view(m.shape).clone();
  }
  return out;
}

torch::Tensor ShardedDataParallel::flatten(size_t f,
                                           const std::map<std::string, torch::Tensor>& by_name) const {
  const FlatInfo& info = flats_[f].info;
  torch::Tensor full = torch::zeros({engine_->padded(static_cast<int>(f))}, shards_[f].options());
  for (const FlatMember& m : info.members) {
    const auto it = by_name.find(m.name);
    if (it == by_name.end())
      throw InvalidArgument("ShardedDataParallel: no tensor for parameter " + m.name);
    if (it->second.sizes().vec() != m.shape)
      throw InvalidArgument("ShardedDataParallel: parameter " + m.name + " has shape " +
                            c10::str(it->second.sizes()) + ", expected " + c10::str(at::IntArrayRef(m.shape)));
    full.narrow(0, m.offset, m.numel).copy_(it->second.reshape({-1}));
  }
  return full;
}

torch::Tensor ShardedDataParallel::my_slice(size_t f, const torch::Tensor& full_flat) const {
  return engine_->my_slice(static_cast<int>(f), full_flat);
}

void ShardedDataParallel::load_full_parameters(const std::map<std::string, torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> slices;
  for (size_t f = 0; f < flats_.size(); ++f) slices.push_back(my_slice(f, flatten(f, params)));
  for (size_t f = 0; f < flats_.size(); ++f) shards_[f].copy_(slices[f]);
}

int64_t ShardedDataParallel::shard_bytes() const {
  int64_t n = 0;
  for (const torch::Tensor& s : shards_) n += static_cast<int64_t>(bytes_of(s));
  return n;
}

int64_t ShardedDataParallel::grad_bytes() const {
  int64_t n = 0;
  for (const torch::Tensor& s : shards_)
    if (s.grad().defined()) n += static_cast<int64_t>(bytes_of(s.grad()));
  return n;
}

}  // namespace heft::parallel::sharded
