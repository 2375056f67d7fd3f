#include "heft/parallel/pipeline/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "heft/error.h"

namespace heft::parallel::pipeline {

std::string to_string(const Action& a) {
  const bool chunks = a.chunk > 0 || a.peer_chunk > 0;
  const std::string m = std::to_string(a.microbatch) + (chunks ? "." + std::to_string(a.chunk) : "");
  const std::string peer = std::to_string(a.peer) + (chunks ? "." + std::to_string(a.peer_chunk) : "");
  switch (a.kind) {
    case ActionKind::kForward: return "F" + m;
    case ActionKind::kBackward: return "B" + m;
    case ActionKind::kRecvActivation: return "rA" + m + "<" + peer;
    case ActionKind::kSendActivation: return "sA" + m + ">" + peer;
    case ActionKind::kRecvGradient: return "rG" + m + "<" + peer;
    case ActionKind::kSendGradient: return "sG" + m + ">" + peer;
  }
  return "?";
}

namespace {

// Chunk c of stage s is virtual stage c·p + s of v·p; its neighbours are the virtual stages
// before and after it.
void forward(std::vector<Action>& out, int s, int p, int m, int c = 0, int v = 1) {
  const int vs = c * p + s, last = v * p - 1;
  if (vs > 0) out.push_back({ActionKind::kRecvActivation, m, (vs - 1) % p, c, (vs - 1) / p});
  out.push_back({ActionKind::kForward, m, -1, c, c});
  if (vs < last) out.push_back({ActionKind::kSendActivation, m, (vs + 1) % p, c, (vs + 1) / p});
}

void backward(std::vector<Action>& out, int s, int p, int m, int c = 0, int v = 1) {
  const int vs = c * p + s, last = v * p - 1;
  if (vs < last) out.push_back({ActionKind::kRecvGradient, m, (vs + 1) % p, c, (vs + 1) / p});
  out.push_back({ActionKind::kBackward, m, -1, c, c});
  if (vs > 0) out.push_back({ActionKind::kSendGradient, m, (vs - 1) % p, c, (vs - 1) / p});
}

}  // namespace

namespace {

// The arguments' checks; returns `active` with its default (stages + 2) applied.
int check_arguments(const std::string& kind, int stages, int microbatches, int active,
                    int virtual_stages) {
  if (stages < 1) throw InvalidArgument("partitions: expected at least 1, found " + std::to_string(stages));
  if (microbatches < 1)
    throw InvalidArgument("microbatches: expected at least 1, found " + std::to_string(microbatches));
  if (kind != "simple" && kind != "interleaved")
    throw InvalidArgument("pipeline: expected simple or interleaved, found '" + kind + "'");
  if (active == 0) active = stages + 2;
  if (active < 1)
    throw InvalidArgument("active_microbatches: expected at least 1, found " + std::to_string(active));
  if (virtual_stages < 1)
    throw InvalidArgument("virtual_stages: expected at least 1, found " + std::to_string(virtual_stages));
  if (virtual_stages > 1 && kind != "interleaved")
    throw InvalidArgument("virtual_stages: needs pipeline interleaved, found " + kind);
  if (virtual_stages > 1 && microbatches % stages != 0)
    throw InvalidArgument("microbatches: with virtual_stages, expected a multiple of partitions (" +
                          std::to_string(stages) + "), found " + std::to_string(microbatches));
  return active;
}

// GPipe: every forward, then every backward.
void simple_actions(std::vector<Action>& out, int s, int p, int microbatches) {
  for (int j = 0; j < microbatches; ++j) forward(out, s, p, j);
  for (int j = 0; j < microbatches; ++j) backward(out, s, p, j);
}

// 1F1B without virtual stages: warm-up forwards, forward/backward pairs, the rest backward.
void one_f_one_b_actions(std::vector<Action>& out, int s, int p, int microbatches, int active) {
  const int warmup = std::min({microbatches, p - s - 1, active - 1});
  int f = 0, b = 0;
  for (; f < warmup; ++f) forward(out, s, p, f);
  while (f < microbatches) {
    forward(out, s, p, f++);
    backward(out, s, p, b++);
  }
  while (b < microbatches) backward(out, s, p, b++);
}

// One compute action of a stage with the receives before it and the sends after it.
struct Step {
  std::vector<Action> recv;
  Action compute;
  std::vector<Action> send;
};

// Interleaved 1F1B with v chunks per stage: the k-th forward (or backward) of stage s.
// Forwards go through the chunks in order p micro-batches at a time, backwards in reverse.
Step virtual_step(bool fwd, int k, int s, int p, int v) {
  const int c = (k / p) % v;
  const int chunk = fwd ? c : v - 1 - c;
  const int micro = (k / (p * v)) * p + k % p;
  std::vector<Action> a;
  if (fwd) forward(a, s, p, micro, chunk, v);
  else backward(a, s, p, micro, chunk, v);
  Step st;
  size_t i = 0;
  while (a[i].communication()) st.recv.push_back(a[i++]);
  st.compute = a[i++];
  for (; i < a.size(); ++i) st.send.push_back(a[i]);
  return st;
}

// Stage s's compute order with virtual stages: `warmup` forwards, then one forward and one
// backward alternately, then the remaining backwards.
std::vector<Step> virtual_order(int s, int p, int v, int total, int warmup) {
  std::vector<Step> seq;
  int f = 0, b = 0;
  for (; f < warmup; ++f) seq.push_back(virtual_step(true, f, s, p, v));
  while (f < total) {
    seq.push_back(virtual_step(true, f++, s, p, v));
    seq.push_back(virtual_step(false, b++, s, p, v));
  }
  for (; b < total; ++b) seq.push_back(virtual_step(false, b, s, p, v));
  return seq;
}

// The actions of `seq`. In the steady state (after `warmup` steps) a forward and a backward
// run back to back, and one batch before the pair carries the previous sends and both
// receives (Megatron's combined send/receive): with the chunks' ring, sends and receives
// posted separately can wait on each other in a cycle.
std::vector<Action> lay_out(const std::vector<Step>& seq, size_t warmup) {
  std::vector<Action> out, pending;
  for (size_t i = 0; i < seq.size();) {
    const bool pair = i >= warmup && i + 1 < seq.size() &&
                      seq[i].compute.kind == ActionKind::kForward &&
                      seq[i + 1].compute.kind == ActionKind::kBackward;
    out.insert(out.end(), pending.begin(), pending.end());
    out.insert(out.end(), seq[i].recv.begin(), seq[i].recv.end());
    if (pair) out.insert(out.end(), seq[i + 1].recv.begin(), seq[i + 1].recv.end());
    out.push_back(seq[i].compute);
    pending = seq[i].send;
    if (pair) {
      out.push_back(seq[i + 1].compute);
      pending.insert(pending.end(), seq[i + 1].send.begin(), seq[i + 1].send.end());
    }
    i += pair ? 2 : 1;
  }
  out.insert(out.end(), pending.begin(), pending.end());
  return out;
}

}  // namespace

Schedule make_schedule(const std::string& kind, int stages, int microbatches, int active,
                       int virtual_stages) {
  Schedule sc;
  sc.kind = kind;
  sc.stages = stages;
  sc.microbatches = microbatches;
  sc.active = check_arguments(kind, stages, microbatches, active, virtual_stages);
  sc.virtual_stages = virtual_stages;
  sc.actions.resize(static_cast<size_t>(stages));
  const int p = stages, v = virtual_stages;
  for (int s = 0; s < p; ++s) {
    std::vector<Action>& out = sc.actions[static_cast<size_t>(s)];
    if (v > 1) {
      const int total = microbatches * v;
      const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
      out = lay_out(virtual_order(s, p, v, total, warmup), static_cast<size_t>(warmup));
    } else if (kind == "simple") {
      simple_actions(out, s, p, microbatches);
    } else {
      one_f_one_b_actions(out, s, p, microbatches, sc.active);
    }
  }
  return sc;
}

double theoretical_bubble(int stages, int microbatches, int virtual_stages) {
  return static_cast<double>(stages - 1) /
         static_cast<double>(virtual_stages * microbatches + stages - 1);
}

namespace {

// Runs the stages' action lists in simulated time (the terms of schedule.h): each stage
// advances while it can (posts its next batch, completes it once every action met its
// counterpart, or starts a compute action when it is free); then time jumps to the next
// compute's end. Nothing left to advance and no compute running is a deadlock.
class Simulator {
 public:
  Simulator(const Schedule& sc, std::vector<double> fc, std::vector<double> bc)
      : sc_(sc), p_(sc.stages), fc_(std::move(fc)), bc_(std::move(bc)),
        st_(static_cast<size_t>(sc.stages)) {
    if (fc_.empty()) fc_.assign(static_cast<size_t>(p_), 1.0);
    if (bc_.empty()) bc_.assign(static_cast<size_t>(p_), 2.0);
    sim_.max_in_flight.assign(static_cast<size_t>(p_), 0);
  }

  Simulation run() {
    for (;;) {
      for (bool progressed = true; progressed;) {
        progressed = false;
        for (int s = 0; s < p_; ++s) progressed = advance(s) || progressed;
      }
      bool all_done = true;
      double next = -1;
      for (int s = 0; s < p_; ++s) {
        const Stage& st = stage(s);
        if (st.pc < actions(s).size()) all_done = false;
        if (st.free_at > now_ && (next < 0 || st.free_at < next)) next = st.free_at;
      }
      if (all_done) break;
      if (next < 0) {
        sim_.error = deadlock();
        return sim_;
      }
      now_ = next;
    }
    sim_.ok = true;
    sim_.bubble = sim_.makespan > 0 ? 1.0 - busy_total_ / (p_ * sim_.makespan) : 0;
    fill_grid();
    return sim_;
  }

 private:
  // A communication action's identity: (from virtual stage, to virtual stage, activation?,
  // micro-batch).
  using Key = std::tuple<int, int, bool, int>;

  struct Stage {
    size_t pc = 0;              // the next action
    double free_at = 0;         // when the current compute ends
    int in_flight = 0;
    size_t begin = 0, end = 0;  // the batch posted and not yet complete
    std::vector<std::pair<double, std::string>> busy;  // compute starts and labels
  };

  Stage& stage(int s) { return st_[static_cast<size_t>(s)]; }
  const Stage& stage(int s) const { return st_[static_cast<size_t>(s)]; }
  const std::vector<Action>& actions(int s) const { return sc_.actions[static_cast<size_t>(s)]; }
  double cost(int s, bool fwd) const {
    return fwd ? fc_[static_cast<size_t>(s)] : bc_[static_cast<size_t>(s)];
  }

  static bool is_send(const Action& a) {
    return a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGradient;
  }

  Key key_of(int s, const Action& a) const {
    const int self = a.chunk * p_ + s, other = a.peer_chunk * p_ + a.peer;
    switch (a.kind) {
      case ActionKind::kSendActivation: return {self, other, true, a.microbatch};
      case ActionKind::kRecvActivation: return {other, self, true, a.microbatch};
      case ActionKind::kSendGradient: return {self, other, false, a.microbatch};
      default: return {other, self, false, a.microbatch};
    }
  }

  // Whether stage s's communication action a has met its counterpart.
  bool matched(int s, const Action& a) const {
    return (is_send(a) ? recvs_posted_ : sends_posted_).count(key_of(s, a)) > 0;
  }

  // One move of stage s; whether it made progress.
  bool advance(int s) {
    Stage& st = stage(s);
    const auto& acts = actions(s);
    if (st.pc >= acts.size() || st.free_at > now_) return false;
    bool progressed = false;
    if (st.begin == st.end && acts[st.pc].communication()) {  // post the next batch
      st.begin = st.end = st.pc;
      for (; st.end < acts.size() && acts[st.end].communication(); ++st.end)
        (is_send(acts[st.end]) ? sends_posted_ : recvs_posted_).insert(key_of(s, acts[st.end]));
      progressed = true;
    }
    if (st.begin != st.end) {  // complete when every action met its counterpart
      for (size_t a = st.begin; a < st.end; ++a)
        if (!matched(s, acts[a])) return progressed;
      st.pc = st.end;
      st.begin = st.end = 0;
      return true;
    }
    start_compute(s, acts[st.pc++]);
    return true;
  }

  void start_compute(int s, const Action& a) {
    Stage& st = stage(s);
    const bool fwd = a.kind == ActionKind::kForward;
    const double c = cost(s, fwd);
    st.busy.push_back({now_, to_string(a)});
    busy_total_ += c;
    st.free_at = now_ + c;
    st.in_flight += fwd ? 1 : -1;
    int& most = sim_.max_in_flight[static_cast<size_t>(s)];
    most = std::max(most, st.in_flight);
    sim_.makespan = std::max(sim_.makespan, now_ + c);
  }

  // Each unfinished stage and the unmatched actions of its batch.
  std::string deadlock() const {
    std::ostringstream os;
    os << "deadlock at time " << now_ << ":";
    for (int s = 0; s < p_; ++s) {
      const Stage& st = stage(s);
      if (st.pc >= actions(s).size()) continue;
      os << " stage " << s << " waits on";
      for (size_t a = st.begin; a < st.end; ++a)
        if (!matched(s, actions(s)[a])) os << " " << to_string(actions(s)[a]);
      os << ";";
    }
    return os.str();
  }

  // The grid in unit slots (costs rounded up).
  void fill_grid() {
    const int slots = static_cast<int>(std::ceil(sim_.makespan - 1e-9));
    sim_.grid.assign(static_cast<size_t>(p_), std::vector<std::string>(static_cast<size_t>(slots)));
    for (int s = 0; s < p_; ++s)
      for (const auto& [start, label] : stage(s).busy) {
        const double c = cost(s, label[0] == 'F');
        const int first = static_cast<int>(std::floor(start + 1e-9));
        const int last = std::min(slots, static_cast<int>(std::ceil(start + c - 1e-9)));
        for (int t = first; t < last; ++t)
          sim_.grid[static_cast<size_t>(s)][static_cast<size_t>(t)] = label;
      }
  }

  const Schedule& sc_;
  const int p_;
  std::vector<double> fc_, bc_;
  std::vector<Stage> st_;
  std::set<Key> sends_posted_, recvs_posted_;
  double now_ = 0, busy_total_ = 0;
  Simulation sim_;
};

}  // namespace

Simulation simulate(const Schedule& sc, std::vector<double> fc, std::vector<double> bc) {
  return Simulator(sc, std::move(fc), std::move(bc)).run();
}

std::string render(const Schedule& sc, const Simulation& sim) {
  std::ostringstream os;
  os << "pipeline " << sc.kind << ": " << sc.stages << " stages x " << sc.microbatches
     << " micro-batches";
  if (sc.virtual_stages > 1) os << ", " << sc.virtual_stages << " virtual stages (model chunks) per stage";
  else if (sc.kind == "interleaved") os << ", at most " << sc.active << " in flight";
  os << " (forward 1, backward 2 time units)\n";
  if (!sim.ok) {
    os << "  " << sim.error << "\n";
    return os.str();
  }
  for (int s = 0; s < sc.stages; ++s) {
    os << "stage " << s << " |";
    for (const std::string& cell : sim.grid[static_cast<size_t>(s)]) {
      std::string c = cell.empty() ? "." : cell;
      c.resize(sc.virtual_stages > 1 ? 6 : 4, ' ');
      os << c;
    }
    os << "| in flight <= " << sim.max_in_flight[static_cast<size_t>(s)] << "\n";
  }
  char line[160];
  std::snprintf(line, sizeof(line), "bubble %.3f (theory (p-1)/(v*m+p-1) = %.3f), makespan %.0f units\n",
                sim.bubble, theoretical_bubble(sc.stages, sc.microbatches, sc.virtual_stages),
                sim.makespan);
  os << line;
  return os.str();
}

}  // namespace heft::parallel::pipeline
