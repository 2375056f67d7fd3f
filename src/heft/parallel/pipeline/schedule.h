// Pipeline schedules as data: for each stage, the ordered list of actions it runs for one
// step of m micro-batches, generated for the schedules below, checked by a simulator before
// a step runs, and executed exactly by the runtime (pipeline.h).
//
// Actions of stage s (of p): Forward m and Backward m (compute), and the communication
// around them: RecvActivation m from s-1 before Forward m (s > 0), SendActivation m to s+1
// after it (s < p-1); RecvGradient m from s+1 before Backward m (s < p-1), SendGradient m to
// s-1 after it (s > 0). Consecutive communication actions form one batch that the runtime
// issues as one exchange (Communicator::exchange): its sends and receives progress together.
//
// Schedules:
//   simple       GPipe: every forward, then every backward (in micro-batch order). A stage
//                holds the activations of all m micro-batches.
//   interleaved  1F1B: stage s runs min(m, p-s-1, active-1) warm-up forwards, then one
//                forward and one backward alternately, then the remaining backwards. At most
//                `active` micro-batches are in flight on a stage (forwarded, not yet
//                backwarded); the seeds' default is partitions + 2, and 1F1B needs only p-s.
// The bubble (idle share of the step) of both, with equal stages, is (p-1)/(m+p-1).
//
// The simulator runs the lists with a cost per forward and per backward (unit costs, or
// profiled ones), treating communication as a rendezvous: a send completes when its
// receive is posted and the reverse, a batch when all its actions completed. A list that
// cannot finish (a receive without its send, an order that waits in a cycle) is a
// deadlock, reported naming the stage and the action it waits on.
#pragma once

#include <string>
#include <vector>

namespace heft::parallel::pipeline {

enum class ActionKind { kForward, kBackward, kRecvActivation, kSendActivation, kRecvGradient, kSendGradient };

struct Action {
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  int peer = -1;  // the other stage of a communication action
  int chunk = 0;  // with virtual stages: which of this stage's model chunks (0..v-1)
  int peer_chunk = 0;
  bool communication() const { return kind != ActionKind::kForward && kind != ActionKind::kBackward; }
};

// "F3", "B3", "rA3<0", "sA3>2", "rG3<2", "sG3>0"; with virtual stages the chunk follows a
// dot: "F3.1", "rA3.1<0.1".
std::string to_string(const Action& a);

struct Schedule {
  std::string kind;  // simple | interleaved
  int stages = 1;
  int microbatches = 1;
  int active = 0;  // interleaved: the most micro-batches in flight per stage
  int virtual_stages = 1;  // model chunks per stage (v)
  std::vector<std::vector<Action>> actions;  // per stage
};

// Throws heft::InvalidArgument naming the field for stages or microbatches < 1, an unknown
// kind, or active < 1.
//
// virtual_stages v > 1 (interleaved only; Megatron's interleaved 1F1B): the model is cut into
// v·p chunks and stage s holds chunks s, s + p, s + 2p, ...; a micro-batch passes every
// stage v times. Stage s runs (p-s-1)·2 + (v-1)·p warm-up forwards, then one forward and one
// backward alternately; forwards go through its chunks in order p micro-batches at a time,
// backwards in reverse. m must be a multiple of p (microbatches named otherwise). The bubble
// falls toward (p-1)/(v·m+p-1). active_microbatches does not apply.
Schedule make_schedule(const std::string& kind, int stages, int microbatches, int active = 0,
                       int virtual_stages = 1);

struct Simulation {
  bool ok = false;
  std::string error;                    // the deadlock, when not ok
  double makespan = 0;                  // time of the last action
  double bubble = 0;                    // idle share: 1 - busy / (stages * makespan)
  std::vector<int> max_in_flight;       // per stage
  std::vector<std::vector<std::string>> grid;  // per stage, per unit time slot: "F3", "B3", ""
};

// forward_cost and backward_cost per stage (empty: 1 and 2 for every stage).
Simulation simulate(const Schedule& schedule, std::vector<double> forward_cost = {},
                    std::vector<double> backward_cost = {});

// The theory: (p-1)/(v·m+p-1).
double theoretical_bubble(int stages, int microbatches, int virtual_stages = 1);

// The timeline as a grid of stages x time slots, with the bubble beside the theory.
std::string render(const Schedule& schedule, const Simulation& simulation);

}  // namespace heft::parallel::pipeline
