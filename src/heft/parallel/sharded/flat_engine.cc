// Terms as in the header: flat, shard, full buffer, unit, pending reduction.
#include "heft/parallel/sharded/flat_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "heft/check.h"
#include "heft/error.h"

namespace heft::parallel::sharded {

namespace {

size_t bytes_of(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// The storage behind `t`, given memory (allocate) or none (free); every view follows.
void allocate(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = bytes_of(t);
  if (s->nbytes() == bytes && s->data() != nullptr) return;
  s->set_data_ptr_noswap(c10::GetAllocator(c10::DeviceType::CPU)->allocate(bytes));
  s->set_nbytes(bytes);
}
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, at::Device(at::kCPU)));
  s->set_nbytes(0);
}

}  // namespace

FlatEngine::FlatEngine(ProcessGroup* shard, ProcessGroup* replicate, EngineOptions options)
    : shard_(shard && shard->size() > 1 ? shard : nullptr),
      replicate_(replicate && replicate->size() > 1 ? replicate : nullptr),
      options_(options) {
  if (options_.max_reductions_in_flight < 0)
    throw InvalidArgument("FlatEngine: max_reductions_in_flight " +
                          std::to_string(options_.max_reductions_in_flight) + ": expected >= 0");
}

FlatEngine::~FlatEngine() {
  for (Flat& f : flats_) {
    try {
      if (f.gather) f.gather->wait();
    } catch (...) {
    }
  }
  for (Pending& p : pending_) {
    try {
      if (p.work) p.work->wait();
    } catch (...) {
    }
  }
}

int64_t FlatEngine::shard_numel_for(int64_t numel) const {
  const int64_t s = shard_size();
  return (std::max<int64_t>(numel, 1) + s - 1) / s;
}

torch::Tensor FlatEngine::shard_of_first_rank(const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  const int64_t n = values.numel(), shard_numel = shard_numel_for(n);
  torch::Tensor full = torch::zeros({shard_numel * shard_size()}, torch::kFloat);
  full.narrow(0, 0, n).copy_(values.reshape({-1}));
  if (shard_) shard_->broadcast(full, 0);
  if (replicate_) replicate_->broadcast(full, 0);
  return full.narrow(0, shard_rank() * shard_numel, shard_numel).clone();
}

int FlatEngine::add_flat(torch::Tensor shard, int64_t numel) {
  const int64_t shard_numel = shard_numel_for(numel);
  if (!shard.defined() || shard.scalar_type() != torch::kFloat || shard.dim() != 1 ||
      shard.numel() != shard_numel || !shard.device().is_cpu() || !shard.is_contiguous())
    throw InvalidArgument("FlatEngine: the shard of a flat of " + std::to_string(numel) +
                          " elements must be a contiguous float32 CPU vector of " +
                          std::to_string(shard_numel) + " elements");
  Flat f;
  f.shard = std::move(shard);
  f.numel = numel;
  f.full = torch::empty({shard_numel * shard_size()}, torch::TensorOptions().dtype(options_.compute_dtype));
  f.full_raw = f.full.variable_data();
  free_storage(f.full);
  flats_.push_back(std::move(f));
  return static_cast<int>(flats_.size()) - 1;
}

int FlatEngine::add_unit(std::vector<int> flats) {
  const int unit = static_cast<int>(units_.size());
  for (int f : flats) {
    if (f < 0 || f >= static_cast<int>(flats_.size()))
      throw InvalidArgument("FlatEngine: add_unit: no flat " + std::to_string(f));
    if (flats_[f].unit >= 0)
      throw InvalidArgument("FlatEngine: add_unit: flat " + std::to_string(f) + " is in unit " +
                            std::to_string(flats_[f].unit) + " already");
    flats_[f].unit = unit;
  }
  units_.push_back(Unit{std::move(flats), false});
  return unit;
}

bool FlatEngine::gather_in_flight() const {
  return std::any_of(flats_.begin(), flats_.end(), [](const Flat& f) { return f.gather != nullptr; });
}

void FlatEngine::gather(int unit, bool prefetch) {
  Unit& u = units_.at(unit);
  if (u.gathered) return;
  u.gathered = true;
  torch::NoGradGuard no_grad;
  for (int i : u.flats) {
    Flat& f = flats_[i];
    allocate(f.full);
    torch::Tensor send = f.shard.detach();
    if (send.scalar_type() != options_.compute_dtype) send = send.to(options_.compute_dtype);
    ++counters_.allgathers;
    if (!shard_) {
      f.full_raw.copy_(send);
      continue;
    }
    f.send = send;
    f.gather = shard_->allgather_async(f.send, f.full_raw);
  }
  if (prefetch) ++counters_.prefetched;
  const int64_t n = std::count_if(units_.begin(), units_.end(), [](const Unit& x) { return x.gathered; });
  counters_.max_gathered = std::max(counters_.max_gathered, n);
}

void FlatEngine::wait_gathered(int unit) {
  for (int i : units_.at(unit).flats) {
    Flat& f = flats_[i];
    if (!f.gather) continue;
    std::shared_ptr<Work> w = std::move(f.gather);
    f.gather.reset();
    w->wait();
    f.send = torch::Tensor();
  }
}

void FlatEngine::release(int unit) {
  Unit& u = units_.at(unit);
  if (!u.gathered) return;
  wait_gathered(unit);
  for (int i : u.flats) free_storage(flats_[i].full);
  u.gathered = false;
}

void FlatEngine::reduce(int flat, const torch::Tensor& grad) {
  Flat& f = flats_.at(flat);
  if (grad.numel() != f.full.numel())
    throw InvalidArgument("FlatEngine: reduce: flat " + std::to_string(flat) + " takes a gradient of " +
                          std::to_string(f.full.numel()) + " elements, given " +
                          std::to_string(grad.numel()));
  torch::NoGradGuard no_grad;
  ++counters_.reduce_scatters;
  const int cap = options_.max_reductions_in_flight;
  if (cap > 0) {
    int64_t in_flight = std::count_if(pending_.begin(), pending_.end(),
                                      [](const Pending& p) { return p.work != nullptr; });
    if (in_flight >= cap) {
      ++counters_.reductions_capped;
      for (Pending& p : pending_)
        if (p.work) {  // the oldest
          std::shared_ptr<Work> w = std::move(p.work);
          p.work.reset();
          w->wait();
          --in_flight;
          break;
        }
    }
    counters_.max_reductions_in_flight =
        std::max<int64_t>(counters_.max_reductions_in_flight, in_flight + (shard_ ? 1 : 0));
  }
  torch::Tensor in = grad.reshape({-1});
  if (in.scalar_type() != options_.reduce_dtype) in = in.to(options_.reduce_dtype);
  in = in.contiguous();
  Pending p;
  p.flat = flat;
  p.out = torch::empty({f.shard.numel()}, in.options());
  if (shard_)
    p.work = shard_->reduce_scatter_async(in, p.out, comm::ReduceOp::avg);
  else
    p.out.copy_(in);
  pending_.push_back(std::move(p));
}

void FlatEngine::finish_reductions() {
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  std::exception_ptr error;
  auto wait = [&error](std::shared_ptr<Work>& w) {
    if (!w) return;
    try {
      w->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    w.reset();
  };
  // Flat order: the same on every rank whatever order backward reduced them in.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const Pending& a, const Pending& b) { return a.flat < b.flat; });
  std::vector<std::shared_ptr<Work>> replicas;
  for (Pending& p : pending) {
    wait(p.work);
    if (!error && replicate_) {
      replicas.push_back(replicate_->allreduce_async(p.out, comm::ReduceOp::avg));
      ++counters_.replicate_allreduces;
    }
  }
  for (auto& w : replicas) wait(w);
  if (error) std::rethrow_exception(error);
  torch::NoGradGuard no_grad;
  for (Pending& p : pending) {
    torch::Tensor& shard = flats_[p.flat].shard;
    torch::Tensor g = p.out.scalar_type() == torch::kFloat ? p.out : p.out.to(torch::kFloat);
    if (shard.grad().defined())
      shard.mutable_grad().add_(g);
    else
      shard.mutable_grad() = g;
  }
}

torch::Tensor FlatEngine::full_values(int flat, const torch::Tensor& part) {
  torch::NoGradGuard no_grad;
  const Flat& f = flats_.at(flat);
  if (part.defined() && part.numel() != f.shard.numel())
    throw InvalidArgument("FlatEngine: full_values: flat " + std::to_string(flat) + "'s part has " +
                          std::to_string(f.shard.numel()) + " elements, given " + std::to_string(part.numel()));
  torch::Tensor shard = (part.defined() ? part : f.shard).detach().reshape({-1}).to(torch::kFloat).contiguous();
  if (!shard_) return shard.clone();
  torch::Tensor out = torch::empty({f.full.numel()}, torch::kFloat);
  shard_->allgather(shard, out);
  return out;
}

torch::Tensor FlatEngine::my_slice(int flat, const torch::Tensor& padded_values) const {
  const int64_t s = flats_.at(flat).shard.numel();
  HEFT_CHECK(padded_values.numel() == s * shard_size(), "my_slice: ", padded_values.numel(),
             " elements, expected ", s * shard_size());
  return padded_values.reshape({-1}).narrow(0, shard_rank() * s, s);
}

void FlatEngine::scale_grads(double factor) {
  torch::NoGradGuard no_grad;
  for (Flat& f : flats_)
    if (f.shard.grad().defined()) f.shard.mutable_grad().mul_(factor);
}

double FlatEngine::clip_grad_norm(double max_norm, double norm_type) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (Flat& f : flats_)
    if (f.shard.grad().defined()) grads.push_back(f.shard.grad());
  const bool inf = std::isinf(norm_type);
  torch::Tensor local = torch::zeros({1}, torch::kFloat);
  for (const torch::Tensor& g : grads) {
    if (inf)
      local = torch::maximum(local, g.abs().max().reshape({1}).to(torch::kFloat));
    else
      local += g.norm(norm_type).pow(norm_type).reshape({1}).to(torch::kFloat);
  }
  if (shard_) shard_->allreduce(local, inf ? comm::ReduceOp::max : comm::ReduceOp::sum);
  const double total = inf ? local.item<double>() : local.pow(1.0 / norm_type).item<double>();
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (torch::Tensor& g : grads) g.mul_(coef);
  return total;
}

}  // namespace heft::parallel::sharded
