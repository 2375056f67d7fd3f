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

Schedule make_schedule(const std::string& kind, int stages, int microbatches, int active,
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
  Schedule sc;
  sc.kind = kind;
  sc.stages = stages;
  sc.microbatches = microbatches;
  sc.active = active;
  sc.virtual_stages = virtual_stages;
  sc.actions.resize(static_cast<size_t>(stages));
  if (virtual_stages > 1) {
    const int p = stages, v = virtual_stages, total = microbatches * v;
    auto chunk_of = [&](int k, bool fwd) {
      const int c = (k / p) % v;
      return fwd ? c : v - 1 - c;
    };
    auto micro_of = [&](int k) { return (k / (p * v)) * p + k % p; };
    for (int s = 0; s < p; ++s) {
      // The compute order, each with the receive before it and the send after it.
      struct Step {
        std::vector<Action> recv;
        Action compute;
        std::vector<Action> send;
      };
      auto step = [&](bool fwd, int k) {
        std::vector<Action> a;
        if (fwd) forward(a, s, p, micro_of(k), chunk_of(k, true), v);
        else backward(a, s, p, micro_of(k), chunk_of(k, false), v);
        Step st;
        size_t i = 0;
        while (a[i].communication()) st.recv.push_back(a[i++]);
        st.compute = a[i++];
        for (; i < a.size(); ++i) st.send.push_back(a[i]);
        return st;
      };
      const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
      std::vector<Step> seq;
      int f = 0, b = 0;
      for (; f < warmup; ++f) seq.push_back(step(true, f));
      while (f < total) {
        seq.push_back(step(true, f++));
        seq.push_back(step(false, b++));
      }
      for (; b < total; ++b) seq.push_back(step(false, b));
      // In the steady state a forward and a backward run back to back, and one batch before
      // the pair carries the previous sends and both receives (Megatron's combined
      // send/receive): with the chunks' ring, sends and receives posted separately can wait
      // on each other in a cycle.
      std::vector<Action>& out = sc.actions[static_cast<size_t>(s)];
      std::vector<Action> pending;
      for (size_t i = 0; i < seq.size();) {
        const bool pair = i >= static_cast<size_t>(warmup) && i + 1 < seq.size() &&
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
    }
    return sc;
  }
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

double theoretical_bubble(int stages, int microbatches, int virtual_stages) {
  return static_cast<double>(stages - 1) /
         static_cast<double>(virtual_stages * microbatches + stages - 1);
}

Simulation simulate(const Schedule& sc, std::vector<double> fc, std::vector<double> bc) {
  const int p = sc.stages;
  if (fc.empty()) fc.assign(static_cast<size_t>(p), 1.0);
  if (bc.empty()) bc.assign(static_cast<size_t>(p), 2.0);
  Simulation sim;
  sim.max_in_flight.assign(static_cast<size_t>(p), 0);
  // A communication action's identity: (from stage, to stage, activation?, micro-batch).
  // (from virtual stage, to virtual stage, activation?, micro-batch).
  using Key = std::tuple<int, int, bool, int>;
  auto key_of = [p](int stage, const Action& a) -> Key {
    const int self = a.chunk * p + stage, other = a.peer_chunk * p + a.peer;
    switch (a.kind) {
      case ActionKind::kSendActivation: return {self, other, true, a.microbatch};
      case ActionKind::kRecvActivation: return {other, self, true, a.microbatch};
      case ActionKind::kSendGradient: return {self, other, false, a.microbatch};
      default: return {other, self, false, a.microbatch};
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
