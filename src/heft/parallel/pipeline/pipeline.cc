#include "heft/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "heft/error.h"
#include "heft/step_profiler/step_profiler.h"

namespace heft::parallel::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A message's tag: its micro-batch, the virtual stage receiving it, and its kind.
uint32_t tag_of(bool activation, int m, int receiver, int virtual_count) {
  return static_cast<uint32_t>((m * virtual_count + receiver) * 2 + (activation ? 0 : 1));
}

bool is_send(ActionKind kind) {
  return kind == ActionKind::kSendActivation || kind == ActionKind::kSendGradient;
}

// One step of one stage: walks its action list, holding the tensors in flight keyed by
// (chunk, micro-batch).
class StageRun {
 public:
  StageRun(const Schedule& sc, ProcessGroup& group, const StageFunctions& stage,
           PipelineCounters* counters)
      : group_(group),
        stage_(stage),
        counters_(counters),
        s_(group.rank()),
        p_(sc.stages),
        virtual_count_(sc.virtual_stages * sc.stages),
        acts_(sc.actions[static_cast<size_t>(group.rank())]) {}

  void run() {
    size_t last_backward = acts_.size();
    for (size_t i = 0; i < acts_.size(); ++i)
      if (acts_[i].kind == ActionKind::kBackward) last_backward = i;
    for (size_t i = 0; i < acts_.size();) {
      if (acts_[i].communication()) {
        i = exchange(i);
        continue;
      }
      const size_t index = i;
      const Action& a = acts_[i++];
      if (a.kind == ActionKind::kForward)
        forward(a);
      else
        backward(a, index == last_backward);
    }
  }

 private:
  static int key(int chunk, int m) { return chunk * 1000003 + m; }
  static int key(const Action& a) { return key(a.chunk, a.microbatch); }

  // The actions from acts_[i] up to the next compute action, as one exchange; returns the
  // index of that compute action (or the end).
  size_t exchange(size_t i) {
    std::vector<TensorP2P> ops;
    for (; i < acts_.size() && acts_[i].communication(); ++i) {
      const Action& a = acts_[i];
      switch (a.kind) {
        case ActionKind::kRecvActivation:
          ops.push_back(receive(inputs_, stage_.activation_shape(a.microbatch), a, true));
          break;
        case ActionKind::kSendActivation: ops.push_back(send(to_send_act_, a, true)); break;
        case ActionKind::kRecvGradient:
          ops.push_back(receive(received_grads_, outputs_.at(key(a)).sizes().vec(), a, false));
          break;
        case ActionKind::kSendGradient: ops.push_back(send(to_send_grad_, a, false)); break;
        default: break;
      }
      if (counters_) ++(is_send(a.kind) ? counters_->sends : counters_->recvs);
    }
    group_.exchange(ops);
    if (counters_) ++counters_->exchanges;
    release_sent(ops);
    return i;
  }

  // A receive of `a` into a new tensor of `shape`, kept in `into`.
  TensorP2P receive(std::map<int, torch::Tensor>& into, const std::vector<int64_t>& shape,
                    const Action& a, bool activation) {
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(stage_.dtype));
    into[key(a)] = t;
    return TensorP2P::from(t, a.peer, tag_of(activation, a.microbatch, a.chunk * p_ + s_, virtual_count_));
  }

  // A send of `a`'s tensor held in `from`.
  TensorP2P send(const std::map<int, torch::Tensor>& from, const Action& a, bool activation) {
    return TensorP2P::to(from.at(key(a)), a.peer,
                         tag_of(activation, a.microbatch, a.peer_chunk * p_ + a.peer, virtual_count_));
  }

  // Sent tensors are no longer needed.
  void release_sent(const std::vector<TensorP2P>& ops) {
    for (const TensorP2P& op : ops)
      if (op.send) {
        for (auto* m : {&to_send_act_, &to_send_grad_})
          for (auto it = m->begin(); it != m->end();)
            it = it->second.data_ptr() == op.tensor.data_ptr() ? m->erase(it) : std::next(it);
      }
  }

  void forward(const Action& a) {
    const Clock::time_point t0 = Clock::now();
    const int k = key(a);
    const int vs = a.chunk * p_ + s_;
    torch::Tensor input;
    if (vs > 0) input = inputs_.at(k).requires_grad_(true);
    torch::Tensor out = [&] {
      auto timed = profile::phase(profile::Phase::kForward);
      return stage_.forward(a.chunk, a.microbatch, input);
    }();
    outputs_[k] = out;
    if (vs < virtual_count_ - 1) to_send_act_[k] = out.detach().contiguous();
    if (counters_) {
      counters_->forward_seconds += count_compute(a.microbatch, t0);
      counters_->max_in_flight = std::max(counters_->max_in_flight, static_cast<int>(outputs_.size()));
    }
  }

  void backward(const Action& a, bool last_backward) {
    const Clock::time_point t0 = Clock::now();
    const int k = key(a);
    const int vs = a.chunk * p_ + s_;
    auto run = [&] {
      torch::Tensor out = outputs_.at(k);
      if (vs == virtual_count_ - 1)
        out.backward();
      else
        torch::autograd::backward({out}, {received_grads_.at(k).view(out.sizes())});
    };
    {
      auto timed = profile::phase(profile::Phase::kBackward);
      if (stage_.around_backward) stage_.around_backward(a.microbatch, last_backward, run);
      else run();
    }
    if (vs > 0) {
      const torch::Tensor& in = inputs_.at(k);
      to_send_grad_[k] = in.grad().defined() ? in.grad().contiguous() : torch::zeros_like(in);
    }
    outputs_.erase(k);
    inputs_.erase(k);
    received_grads_.erase(k);
    if (counters_) count_compute(a.microbatch, t0);
  }

  // Adds the compute since t0 to the counters; returns its seconds.
  double count_compute(int m, Clock::time_point t0) {
    const double s = seconds_since(t0);
    counters_->busy_seconds += s;
    counters_->microbatch_seconds.at(static_cast<size_t>(m)) += s;
    return s;
  }

  ProcessGroup& group_;
  const StageFunctions& stage_;
  PipelineCounters* counters_;
  const int s_, p_, virtual_count_;
  const std::vector<Action>& acts_;
  std::map<int, torch::Tensor> inputs_, outputs_, received_grads_;
  std::map<int, torch::Tensor> to_send_act_, to_send_grad_;  // kept alive until sent
};

}  // namespace

void run_stage(const Schedule& sc, ProcessGroup& group, const StageFunctions& stage,
               PipelineCounters* counters) {
  if (sc.stages != group.size())
    throw InvalidArgument("pipeline: a schedule of " + std::to_string(sc.stages) +
                          " stages on a pipeline group of " + std::to_string(group.size()));
  const Clock::time_point start = Clock::now();
  if (counters) counters->microbatch_seconds.assign(static_cast<size_t>(sc.microbatches), 0.0);
  StageRun(sc, group, stage, counters).run();
  if (counters) counters->step_seconds += seconds_since(start);
}

}  // namespace heft::parallel::pipeline
