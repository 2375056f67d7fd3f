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
  const std::string m = std::to_string(a.microbatch);
  switch (a.kind) {
    case ActionKind::kForward: return "F" + m;
    case ActionKind::kBackward: return "B" + m;
    case ActionKind::kRecvActivation: return "rA" + m + "<" + std::to_string(a.peer);
    case ActionKind::kSendActivation: return "sA" + m + ">" + std::to_string(a.peer);
    case ActionKind::kRecvGradient: return "rG" + m + "<" + std::to_string(a.peer);
    case ActionKind::kSendGradient: return "sG" + m + ">" + std::to_string(a.peer);
  }
  return "?";
}

namespace {

void forward(std::vector<Action>& out, int s, int p, int m) {
  if (s > 0) out.push_back({ActionKind::kRecvActivation, m, s - 1});
  out.push_back({ActionKind::kForward, m, -1});
  if (s < p - 1) out.push_back({ActionKind::kSendActivation, m, s + 1});
}

void backward(std::vector<Action>& out, int s, int p, int m) {
  if (s < p - 1) out.push_back({ActionKind::kRecvGradient, m, s + 1});
  out.push_back({ActionKind::kBackward, m, -1});
  if (s > 0) out.push_back({ActionKind::kSendGradient, m, s - 1});
}

}  // namespace

Schedule make_schedule(const std::string& kind, int stages, int microbatches, int active) {
  if (stages < 1) throw InvalidArgument("partitions: expected at least 1, found " + std::to_string(stages));
  if (microbatches < 1)
    throw InvalidArgument("microbatches: expected at least 1, found " + std::to_string(microbatches));
  if (kind != "simple" && kind != "interleaved")
    throw InvalidArgument("pipeline: expected simple or interleaved, found '" + kind + "'");
  if (active == 0) active = stages + 2;
  if (active < 1)
    throw InvalidArgument("active_microbatches: expected at least 1, found " + std::to_string(active));
  Schedule sc;
  sc.kind = kind;
  sc.stages = stages;
  sc.microbatches = microbatches;
  sc.active = active;
  sc.actions.resize(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    std::vector<Action>& out = sc.actions[static_cast<size_t>(s)];
    if (kind == "simple") {
      for (int j = 0; j < microbatches; ++j) forward(out, s, stages, j);
      for (int j = 0; j < microbatches; ++j) backward(out, s, stages, j);
      continue;
    }
    const int warmup = std::min({microbatches, stages - s - 1, active - 1});
    int f = 0, b = 0;
    for (; f < warmup; ++f) forward(out, s, stages, f);
    while (f < microbatches) {
      forward(out, s, stages, f++);
      backward(out, s, stages, b++);
    }
    while (b < microbatches) backward(out, s, stages, b++);
  }
  return sc;
}

double theoretical_bubble(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

Simulation simulate(const Schedule& sc, std::vector<double> fc, std::vector<double> bc) {
  const int p = sc.stages;
  if (fc.empty()) fc.assign(static_cast<size_t>(p), 1.0);
  if (bc.empty()) bc.assign(static_cast<size_t>(p), 2.0);
  Simulation sim;
  sim.max_in_flight.assign(static_cast<size_t>(p), 0);
  // A communication action's identity: (from stage, to stage, activation?, micro-batch).
  using Key = std::tuple<int, int, bool, int>;
  auto key_of = [](int stage, const Action& a) -> Key {
    switch (a.kind) {
      case ActionKind::kSendActivation: return {stage, a.peer, true, a.microbatch};
      case ActionKind::kRecvActivation: return {a.peer, stage, true, a.microbatch};
      case ActionKind::kSendGradient: return {stage, a.peer, false, a.microbatch};
      default: return {a.peer, stage, false, a.microbatch};
    }
  };
  std::set<Key> sends_posted, recvs_posted;
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);  // when the current compute ends
  std::vector<int> in_flight(static_cast<size_t>(p), 0);
  // Per stage: the batch posted and not yet complete: [begin, end) of its actions.
  std::vector<std::pair<size_t, size_t>> batch(static_cast<size_t>(p), {0, 0});
  std::vector<std::vector<std::pair<double, std::string>>> busy(static_cast<size_t>(p));
  double now = 0, busy_total = 0;
  for (;;) {
    bool progressed = true;
    while (progressed) {
      progressed = false;
      for (int s = 0; s < p; ++s) {
        const auto& acts = sc.actions[static_cast<size_t>(s)];
        size_t& i = pc[static_cast<size_t>(s)];
        if (i >= acts.size() || free_at[static_cast<size_t>(s)] > now) continue;
        auto& [begin, end] = batch[static_cast<size_t>(s)];
        if (begin == end && acts[i].communication()) {  // post the next batch
          begin = i;
          end = i;
          while (end < acts.size() && acts[end].communication()) {
            const Key k = key_of(s, acts[end]);
            const bool send = acts[end].kind == ActionKind::kSendActivation ||
                              acts[end].kind == ActionKind::kSendGradient;
            (send ? sends_posted : recvs_posted).insert(k);
            ++end;
          }
          progressed = true;
        }
        if (begin != end) {  // complete when every action met its counterpart
          bool done = true;
          for (size_t a = begin; a < end && done; ++a) {
            const Key k = key_of(s, acts[a]);
            const bool send = acts[a].kind == ActionKind::kSendActivation ||
                              acts[a].kind == ActionKind::kSendGradient;
            done = send ? recvs_posted.count(k) > 0 : sends_posted.count(k) > 0;
          }
          if (!done) continue;
          i = end;
          begin = end = 0;
          progressed = true;
          continue;
        }
        const Action& a = acts[i];  // compute
        const bool fwd = a.kind == ActionKind::kForward;
        const double cost = fwd ? fc[static_cast<size_t>(s)] : bc[static_cast<size_t>(s)];
        busy[static_cast<size_t>(s)].push_back({now, to_string(a)});
        busy_total += cost;
        free_at[static_cast<size_t>(s)] = now + cost;
        in_flight[static_cast<size_t>(s)] += fwd ? 1 : -1;
        sim.max_in_flight[static_cast<size_t>(s)] =
            std::max(sim.max_in_flight[static_cast<size_t>(s)], in_flight[static_cast<size_t>(s)]);
        sim.makespan = std::max(sim.makespan, now + cost);
        ++i;
        progressed = true;
      }
    }
    bool all_done = true;
    double next = -1;
    for (int s = 0; s < p; ++s) {
      if (pc[static_cast<size_t>(s)] < sc.actions[static_cast<size_t>(s)].size()) all_done = false;
      if (free_at[static_cast<size_t>(s)] > now && (next < 0 || free_at[static_cast<size_t>(s)] < next))
        next = free_at[static_cast<size_t>(s)];
    }
    if (all_done) break;
    if (next < 0) {
      std::ostringstream os;
      os << "deadlock at time " << now << ":";
      for (int s = 0; s < p; ++s) {
        const auto& acts = sc.actions[static_cast<size_t>(s)];
        const auto [begin, end] = batch[static_cast<size_t>(s)];
        if (pc[static_cast<size_t>(s)] >= acts.size()) continue;
        os << " stage " << s << " waits on";
        for (size_t a = begin; a < end; ++a) {  // the unmatched actions of its batch
          const Key k = key_of(s, acts[a]);
          const bool send = acts[a].kind == ActionKind::kSendActivation ||
                            acts[a].kind == ActionKind::kSendGradient;
          if (!(send ? recvs_posted.count(k) : sends_posted.count(k))) os << " " << to_string(acts[a]);
        }
        os << ";";
      }
      sim.error = os.str();
      return sim;
    }
    now = next;
  }
  sim.ok = true;
  sim.bubble = sim.makespan > 0 ? 1.0 - busy_total / (p * sim.makespan) : 0;
  // The grid in unit slots (costs rounded up).
  const int slots = static_cast<int>(std::ceil(sim.makespan - 1e-9));
  sim.grid.assign(static_cast<size_t>(p), std::vector<std::string>(static_cast<size_t>(slots)));
  for (int s = 0; s < p; ++s)
    for (const auto& [start, label] : busy[static_cast<size_t>(s)]) {
      const double cost = label[0] == 'F' ? fc[static_cast<size_t>(s)] : bc[static_cast<size_t>(s)];
      for (int t = static_cast<int>(std::floor(start + 1e-9)); t < std::min(slots, static_cast<int>(std::ceil(start + cost - 1e-9))); ++t)
        sim.grid[static_cast<size_t>(s)][static_cast<size_t>(t)] = label;
    }
  return sim;
}

std::string render(const Schedule& sc, const Simulation& sim) {
  std::ostringstream os;
  os << "pipeline " << sc.kind << ": " << sc.stages << " stages x " << sc.microbatches
     << " micro-batches";
  if (sc.kind == "interleaved") os << ", at most " << sc.active << " in flight";
  os << " (forward 1, backward 2 time units)\n";
  if (!sim.ok) {
    os << "  " << sim.error << "\n";
    return os.str();
  }
  for (int s = 0; s < sc.stages; ++s) {
    os << "stage " << s << " |";
    for (const std::string& cell : sim.grid[static_cast<size_t>(s)]) {
      std::string c = cell.empty() ? "." : cell;
      c.resize(4, ' ');
      os << c;
    }
    os << "| in flight <= " << sim.max_in_flight[static_cast<size_t>(s)] << "\n";
  }
  char line[160];
  std::snprintf(line, sizeof(line), "bubble %.3f (theory (p-1)/(m+p-1) = %.3f), makespan %.0f units\n",
                sim.bubble, theoretical_bubble(sc.stages, sc.microbatches), sim.makespan);
  os << line;
  return os.str();
}

}  // namespace heft::parallel::pipeline
