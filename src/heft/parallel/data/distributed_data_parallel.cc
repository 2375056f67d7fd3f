// Terms: a slot is one parameter that requires grad, with its place (bucket, offset) in a
// bucket's flat buffer; a pass is one synchronised backward, from its first gradient hook
// to the engine callback that finishes it.

#include "heft/parallel/data/distributed_data_parallel.h"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <sstream>

#include "heft/check.h"
#include "heft/error.h"
#include "heft/parallel/grad_buffer.h"
#include "heft/step_profiler/step_profiler.h"

namespace heft::parallel::data {

namespace {

using Clock = std::chrono::steady_clock;

bool is_floating(torch::ScalarType t) {
  return t == torch::kFloat || t == torch::kDouble || t == torch::kHalf;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 ProcessGroup& group,
                                                 DistributedDataParallelOptions options)
    : module_(std::move(module)), group_(group), options_(options) {
  if (!module_) throw InvalidArgument("DistributedDataParallel: module is null");
  if (options_.bucket_bytes == 0 || options_.first_bucket_bytes == 0)
    throw InvalidArgument(
        "DistributedDataParallel: bucket_bytes and first_bucket_bytes must be "
        "positive");
  for (const auto& item : module_->named_parameters()) {
    const torch::Tensor& p = item.value();
    to_comm_dtype(p.scalar_type());  // throws naming the dtype
    if (!p.device().is_cpu() || p.is_sparse())
      throw InvalidArgument("DistributedDataParallel: parameter " + item.key() +
                            " is not a dense CPU tensor");
    if (!p.requires_grad()) continue;
    Slot s;
    s.param = p;
    s.name = item.key();
    slots_.push_back(std::move(s));
  }
  std::reverse(slots_.begin(), slots_.end());
  check_same_parameters();
  broadcast_state();
  build_buckets();
  register_hooks();
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Slot& s : slots_) s.hook.reset();
  for (Bucket& b : buckets_) {
    try {
      if (b.work) b.work->wait();  // never free a buffer the communicator still uses
    } catch (...) {
    }
  }
}

// Every rank must register the same parameters: compare (count, a hash of shapes, dtypes
// and names) through a min and a max allreduce.
void DistributedDataParallel::check_same_parameters() {
  if (group_.size() == 1) return;
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const Slot& s : slots_) {
    for (int64_t d : s.param.sizes()) mix(static_cast<uint64_t>(d));
    mix(static_cast<uint64_t>(s.param.scalar_type()));
    for (char c : s.name) mix(static_cast<unsigned char>(c));
  }
  const int64_t mine[2] = {static_cast<int64_t>(slots_.size()),
                           static_cast<int64_t>(h & 0x7fffffffffffffffull)};
  torch::Tensor lo = torch::tensor({mine[0], mine[1]}, torch::kLong);
  torch::Tensor hi = lo.clone();
  group_.allreduce(lo, comm::ReduceOp::min);
  group_.allreduce(hi, comm::ReduceOp::max);
  if (!torch::equal(lo, hi))
    throw InvalidArgument("DistributedDataParallel: rank " + std::to_string(group_.rank()) +
                          " has " + std::to_string(slots_.size()) +
                          " trainable parameters, but the ranks' models differ (count, "
                          "names, shapes or dtypes); every rank must build the same model");
}

void DistributedDataParallel::broadcast_state() {
  if (group_.size() == 1) return;
  torch::NoGradGuard no_grad;
  auto broadcast_one = [&](torch::Tensor t) {
    if (t.is_contiguous()) {
      torch::Tensor d = t.detach();
      group_.broadcast(d, 0);
    } else {
      torch::Tensor c = t.detach().contiguous();
      group_.broadcast(c, 0);
      t.detach().copy_(c);
    }
  };
  for (const auto& p : module_->parameters()) broadcast_one(p);
  for (const auto& b : module_->buffers()) broadcast_one(b);
}

void DistributedDataParallel::build_buckets() {
  size_t bytes = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const torch::ScalarType wire = options_.bf16_compression && is_floating(s.param.scalar_type())
                                       ? torch::kBFloat16
                                       : s.param.scalar_type();
    const size_t cap = buckets_.size() <= 1 ? options_.first_bucket_bytes : options_.bucket_bytes;
    const bool new_bucket =
        buckets_.empty() || bytes >= cap || buckets_.back().flat.scalar_type() != wire;
    if (new_bucket) {
      buckets_.emplace_back();
      bucket_info_.emplace_back();
      buckets_.back().flat = torch::empty({0}, torch::TensorOptions().dtype(wire));
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    BucketInfo& info = bucket_info_.back();
    s.bucket = static_cast<int>(buckets_.size()) - 1;
    s.offset = info.numel;
    b.slots.push_back(static_cast<int>(i));
    info.parameters.push_back(s.name);
    info.numel += s.param.numel();
    bytes += static_cast<size_t>(s.param.numel()) * torch::elementSize(wire);
    info.bytes = bytes;
  }
  for (size_t k = 0; k < buckets_.size(); ++k)
    buckets_[k].flat = torch::zeros({bucket_info_[k].numel}, buckets_[k].flat.options());
  ready_.assign(slots_.size(), 0);
}

void DistributedDataParallel::register_hooks() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const int slot = static_cast<int>(i);
    s.hook = GradientHookHandle(s.param, [this, slot] { on_gradient(slot); });
    HEFT_CHECK(static_cast<bool>(s.hook), "parameter ", s.name, " has no gradient accumulator");
  }
}

void DistributedDataParallel::on_gradient(int slot) {
  if (!sync_enabled_) return;
  const auto now = Clock::now();
  if (!in_pass_) {
    in_pass_ = true;
    std::fill(ready_.begin(), ready_.end(), 0);
    for (Bucket& b : buckets_) b.pending = static_cast<int>(b.slots.size());
    next_bucket_ = 0;
    timeline_ = BackwardTimeline{};
    timeline_.first_gradient = now;
    timeline_.bucket_launched.assign(buckets_.size(), {});
    timeline_.bucket_done_during_backward.assign(buckets_.size(), false);
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
  }
  timeline_.last_gradient = now;
  for (int k = 0; k < next_bucket_; ++k)
    if (!timeline_.bucket_done_during_backward[k] && buckets_[k].work->test())
      timeline_.bucket_done_during_backward[k] = true;

  Slot& s = slots_[slot];
  if (ready_[slot]) {
    abandon_pass();
    throw InvalidArgument("DistributedDataParallel: parameter " + s.name +
                          " received its gradient twice in one backward pass (reentrant "
                          "backward and activation checkpointing are not supported, and a "
                          "backward pass that failed leaves its gradients behind)");
  }
  ready_[slot] = 1;
  Bucket& b = buckets_[s.bucket];
  const torch::Tensor& g = s.param.grad();
  torch::Tensor dst = bucket_view(s);
  if (!g.defined())
    dst.zero_();
  else if (g.data_ptr() != dst.data_ptr())  // a grad that is already the view needs nothing
    dst.copy_(g);
  --b.pending;
  launch_ready_buckets();
}

torch::Tensor DistributedDataParallel::bucket_view(const Slot& s) {
  return flat_alias(buckets_[s.bucket].flat, s.offset, s.param);
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && buckets_[next_bucket_].pending == 0)
    launch(next_bucket_++);
}

void DistributedDataParallel::launch(int bucket) {
  Bucket& b = buckets_[bucket];
  b.work = group_.allreduce_async(b.flat, comm::ReduceOp::avg);
  timeline_.bucket_launched[bucket] = Clock::now();
}

void DistributedDataParallel::fill_missing_or_throw() {
  std::vector<std::string> missing;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!ready_[i]) missing.push_back(slots_[i].name);
  if (missing.empty()) return;
  if (!options_.find_unused_parameters) {
    std::ostringstream os;
    os << "DistributedDataParallel: rank " << group_.rank() << ": " << missing.size()
       << " parameter(s) received no gradient in this backward pass: ";
    for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
    os << ". Make every parameter take part in the loss, or construct with "
          "find_unused_parameters = true to reduce them as they are";
    throw InvalidArgument(os.str());
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (ready_[i]) continue;
    Slot& s = slots_[i];
    Bucket& b = buckets_[s.bucket];
    torch::Tensor dst = bucket_view(s);
    const torch::Tensor& g = s.param.grad();
    if (!g.defined())
      dst.zero_();
    else if (g.data_ptr() != dst.data_ptr())
      dst.copy_(g);
    ready_[i] = 1;
    --b.pending;
  }
}

void DistributedDataParallel::abandon_pass() {
  in_pass_ = false;
  for (int k = 0; k < next_bucket_; ++k) {
    try {
      buckets_[k].work->wait();
    } catch (...) {
    }
  }
  next_bucket_ = 0;
}

void DistributedDataParallel::finish_backward() {
  in_pass_ = false;
  std::exception_ptr error;
  try {
    fill_missing_or_throw();
    launch_ready_buckets();
  } catch (...) {
    error = std::current_exception();
  }
  // Wait for everything launched, even after an error: the buffers must stay untouched
  // until the communicator is done with them. The wait is the step's communication phase.
  auto timed = profile::phase(profile::Phase::kCommunication);
  for (int k = 0; k < next_bucket_; ++k) {
    try {
      buckets_[k].work->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  HEFT_CHECK_EQ(next_bucket_, static_cast<int>(buckets_.size()));
  torch::NoGradGuard no_grad;
  for (Slot& s : slots_) {
    torch::Tensor src = bucket_view(s);
    torch::Tensor& g = s.param.mutable_grad();
    if (src.scalar_type() == s.param.scalar_type())
      g = src;  // the gradient becomes a view of the bucket: no copy out
    else if (g.defined())
      g.copy_(src);
    else
      g = src.to(s.param.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }
  timeline_.finished = Clock::now();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.sync_enabled_) {
  ddp_.sync_enabled_ = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.sync_enabled_ = previous_; }

}  // namespace heft::parallel::data
