#include "heft/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "heft/error.h"
#include "heft/step_profiler/step_profiler.h"

namespace heft::parallel::pipeline {

namespace {

// A message's tag: its micro-batch, the virtual stage receiving it, and its kind.
uint32_t tag_of(bool activation, int m, int receiver, int virtual_count) {
  return static_cast<uint32_t>((m * virtual_count + receiver) * 2 + (activation ? 0 : 1));
}

}  // namespace

void run_stage(const Schedule& sc, ProcessGroup& group, const StageFunctions& stage,
               PipelineCounters* counters) {
  if (sc.stages != group.size())
    throw InvalidArgument("pipeline: a schedule of " + std::to_string(sc.stages) +
                          " stages on a pipeline group of " + std::to_string(group.size()));
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const Clock::time_point start = Clock::now();
  const int s = group.rank();
  if (counters) counters->microbatch_seconds.assign(static_cast<size_t>(sc.microbatches), 0.0);
  const std::vector<Action>& acts = sc.actions[static_cast<size_t>(s)];
  size_t last_backward = acts.size();
  for (size_t i = 0; i < acts.size(); ++i)
    if (acts[i].kind == ActionKind::kBackward) last_backward = i;
  const int p = sc.stages, V = sc.virtual_stages * p;
  // Keyed by (chunk, micro-batch).
  auto key = [](int chunk, int m) { return chunk * 1000003 + m; };
  std::map<int, torch::Tensor> inputs, outputs, received_grads;
  std::map<int, torch::Tensor> to_send_act, to_send_grad;  // kept alive until sent
  for (size_t i = 0; i < acts.size();) {
    if (acts[i].communication()) {
      std::vector<TensorP2P> ops;
      std::vector<std::pair<int, bool>> received;  // (m, activation?)
      for (; i < acts.size() && acts[i].communication(); ++i) {
        const Action& a = acts[i];
        switch (a.kind) {
          case ActionKind::kRecvActivation: {
            torch::Tensor t = torch::empty(stage.activation_shape(a.microbatch), torch::TensorOptions().dtype(stage.dtype));
            inputs[key(a.chunk, a.microbatch)] = t;
            ops.push_back(TensorP2P::from(t, a.peer, tag_of(true, a.microbatch, a.chunk * p + s, V)));
            break;
          }
          case ActionKind::kSendActivation:
            ops.push_back(TensorP2P::to(to_send_act.at(key(a.chunk, a.microbatch)), a.peer,
                                        tag_of(true, a.microbatch, a.peer_chunk * p + a.peer, V)));
            break;
          case ActionKind::kRecvGradient: {
            torch::Tensor t = torch::empty(outputs.at(key(a.chunk, a.microbatch)).sizes(),
                                           torch::TensorOptions().dtype(stage.dtype));
            received_grads[key(a.chunk, a.microbatch)] = t;
            ops.push_back(TensorP2P::from(t, a.peer, tag_of(false, a.microbatch, a.chunk * p + s, V)));
            break;
          }
          case ActionKind::kSendGradient:
            ops.push_back(TensorP2P::to(to_send_grad.at(key(a.chunk, a.microbatch)), a.peer,
                                        tag_of(false, a.microbatch, a.peer_chunk * p + a.peer, V)));
            break;
          default: break;
        }
        if (counters) ++(a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGradient
                             ? counters->sends : counters->recvs);
      }
      group.exchange(ops);
      if (counters) ++counters->exchanges;
      // Sent tensors are no longer needed.
      for (const TensorP2P& op : ops)
        if (op.send) {
          for (auto* m : {&to_send_act, &to_send_grad})
            for (auto it = m->begin(); it != m->end();)
              it = it->second.data_ptr() == op.tensor.data_ptr() ? m->erase(it) : std::next(it);
        }
      continue;
    }
    const size_t index = i;
    const Action& a = acts[i++];
    const int m = a.microbatch;
    const int k = key(a.chunk, m);
    const int vs = a.chunk * p + s;
    const Clock::time_point t0 = Clock::now();
    if (a.kind == ActionKind::kForward) {
      torch::Tensor input;
      if (vs > 0) input = inputs.at(k).requires_grad_(true);
      torch::Tensor out = [&] {
        auto timed = profile::phase(profile::Phase::kForward);
        return stage.forward(a.chunk, m, input);
      }();
      outputs[k] = out;
      if (vs < V - 1) to_send_act[k] = out.detach().contiguous();
      if (counters) {
        counters->busy_seconds += since(t0);
        counters->microbatch_seconds.at(static_cast<size_t>(m)) += since(t0);
        counters->max_in_flight = std::max(counters->max_in_flight, static_cast<int>(outputs.size()));
      }
      continue;
    }
    // Backward.
    auto run = [&] {
      torch::Tensor out = outputs.at(k);
      if (vs == V - 1)
        out.backward();
      else
        torch::autograd::backward({out}, {received_grads.at(k).view(out.sizes())});
    };
    {
      auto timed = profile::phase(profile::Phase::kBackward);
      if (stage.around_backward) stage.around_backward(m, index == last_backward, run);
      else run();
    }
    if (vs > 0) {
      const torch::Tensor& in = inputs.at(k);
      to_send_grad[k] = in.grad().defined() ? in.grad().contiguous() : torch::zeros_like(in);
    }
    outputs.erase(k);
    inputs.erase(k);
    received_grads.erase(k);
    if (counters) {
      counters->busy_seconds += since(t0);
      counters->microbatch_seconds.at(static_cast<size_t>(m)) += since(t0);
    }
  }
  if (counters) counters->step_seconds += since(start);
}

}  // namespace heft::parallel::pipeline
