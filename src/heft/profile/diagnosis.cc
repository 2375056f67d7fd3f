// Terms: a rank's *pending* collective is its oldest entry not done (queued, running or
// failed); the group's *frontier* is the smallest pending sequence number over its ranks:
// the collective every later one waits behind. A rank whose trace has issued fewer
// collectives than the frontier *never entered* it.
#include "heft/profile/diagnosis.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "heft/comm/trace.h"
#include "heft/job/job_file.h"

namespace heft::profile {

namespace {

namespace fs = std::filesystem;
using comm::TraceEntry;
using comm::TraceFile;
using comm::TraceState;

// Entries of the trace folder looked at (a worker may fill it with files): 16 a rank of the
// largest job.
constexpr size_t kMaxTraceDirEntries = 16 * 1024;

struct RankTrace {
  int rank = 0, world_rank = 0, pid = 0;
  uint64_t issued = 0;
  std::vector<TraceEntry> entries;  // by sequence number
  const TraceEntry* find(uint64_t seq) const {
    for (const TraceEntry& e : entries)
      if (e.seq == seq) return &e;
    return nullptr;
  }
};

// "allreduce(shm, 4096 B)" -> "allreduce"; "exchange[send(to rank 1, ...)]" -> "exchange".
std::string op_kind(const std::string& op) { return op.substr(0, op.find_first_of("([")); }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::max(0.0, s));
  return buf;
}

bool alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// What the mesh's label files say of one communicator (parallel/mesh.h).
struct GroupLabel {
  std::set<int> dims;     // indices into kDimensions
  std::vector<int> ranks;  // world ranks by group rank
};

const char* const kDimensions[] = {"data", "pipeline", "tensor", "replicate", "shard"};

// Every rank-<R>.groups.json under dir whose rank wrote a trace, merged by communicator name
// (the traces are removed at each start of the group; a label file left from a start with
// more ranks is not).
std::map<std::string, GroupLabel> read_labels(const std::string& dir,
                                              const std::set<int>& world_ranks) {
  std::map<std::string, GroupLabel> out;
  std::error_code ec;
  size_t seen = 0;
  for (auto it = fs::directory_iterator(dir, ec);
       !ec && it != fs::directory_iterator() && ++seen <= kMaxTraceDirEntries; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    const std::string suffix = ".groups.json";
    if (file.size() <= suffix.size() || file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const job::JobFileRead read = job::read_job_file(it->path().string(), job::kMaxJobRecordBytes);
    if (!read.ok()) continue;
    const nlohmann::json j = nlohmann::json::parse(read.bytes, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("groups") || !j["groups"].is_array()) continue;
    const nlohmann::json rank = j.value("world_rank", nlohmann::json());
    if (!rank.is_number_integer() || !world_ranks.count(rank.get<int>())) continue;
    for (const nlohmann::json& e : j["groups"]) {
      if (!e.is_object() || !e.value("group", nlohmann::json()).is_string()) continue;
      GroupLabel& l = out[e["group"].get<std::string>()];
      const nlohmann::json dimension = e.value("dimension", nlohmann::json());
      const std::string dim = dimension.is_string() ? dimension.get<std::string>() : "";
      for (int d = 0; d < 5; ++d)
        if (dim == kDimensions[d]) l.dims.insert(d);
      if (l.ranks.empty() && e.value("ranks", nlohmann::json()).is_array())
        for (const nlohmann::json& r : e["ranks"])
          if (r.is_number_integer()) l.ranks.push_back(r.get<int>());
    }
  }
  return out;
}

// Names g by its dimension and lists its members as world ranks, or names it by its
// communicator name when the mesh did not label it.
void label_group(GroupDiagnosis& g, const GroupLabel* l) {
  if (l && !l->dims.empty()) {
    std::set<int> dims = l->dims;
    if (dims.count(0)) dims.erase(3), dims.erase(4);  // the whole data dimension: "data"
    for (int d : dims) g.dimension += (g.dimension.empty() ? "" : "/") + std::string(kDimensions[d]);
    g.ranks = l->ranks;
    g.label = g.dimension + " group " + members_text(g.ranks);
    return;
  }
  g.label = "group " + g.group;
}

// A rank in the group -> its world rank: the mesh's members, else what its trace says.
struct WorldRank {
  const std::map<int, RankTrace>& ranks;
  const GroupLabel* label;
  int operator()(int r) const {
    if (label && r >= 0 && r < static_cast<int>(label->ranks.size()))
      return label->ranks[static_cast<size_t>(r)];
    auto it = ranks.find(r);
    return it == ranks.end() ? r : it->second.world_rank;
  }
};

bool done(const TraceEntry& e) { return e.state == static_cast<int32_t>(TraceState::kDone); }

// The group's frontier (0 when no rank has a collective pending) and the last sequence
// number any rank issued.
std::pair<uint64_t, uint64_t> frontier_and_last(const std::map<int, RankTrace>& ranks) {
  uint64_t frontier = 0;
  uint64_t last_issued = 0;
  for (const auto& [r, t] : ranks) {
    last_issued = std::max(last_issued, t.issued);
    for (const TraceEntry& e : t.entries)
      if (!done(e) && (!frontier || e.seq < frontier)) frontier = e.seq;
  }
  return {frontier, last_issued};
}

// "rank 2 never entered it (last: broadcast #6, done 3.1 s ago); its process 123 is gone".
std::string never_entered(const RankTrace& t, int world_rank, double now) {
  std::string what = "rank " + std::to_string(world_rank) + " never entered it";
  const TraceEntry* last = t.issued ? t.find(t.issued) : nullptr;
  if (last) {
    const std::string state =
        done(*last) ? "done " + seconds(now - last->ended_at) + " ago" : "not finished";
    what += " (last: " + op_kind(last->op) + " #" + std::to_string(last->seq) + ", " + state + ")";
  } else {
    what += " (no collective yet)";
  }
  if (!alive(t.pid)) what += "; its process " + std::to_string(t.pid) + " is gone";
  return what;
}

// "ranks 0, 1, 3 wait in it for rank 2 (for 4.0 s)": whom g.waiting wait for is the ranks
// behind, else the peers they named, else the ranks whose process is gone; g.waited_for
// becomes that list.
std::string waiting_text(GroupDiagnosis& g, const std::map<int, RankTrace>& ranks,
                         const WorldRank& world, double waiting_since, double now) {
  std::string w = ranks_text(g.waiting) + (g.waiting.size() == 1 ? " waits" : " wait") + " in it";
  std::vector<int> on = g.behind;
  if (on.empty()) {
    std::set<int> peers(g.waited_for.begin(), g.waited_for.end());
    on.assign(peers.begin(), peers.end());
  }
  if (on.empty())
    for (const auto& [r, t] : ranks)
      if (!alive(t.pid)) on.push_back(world(r));
  if (!on.empty()) w += " for " + ranks_text(on);
  w += " (for " + seconds(now - waiting_since) + ")";
  g.waited_for = on;
  return w;
}

GroupDiagnosis diagnose_group(const std::string& group, const std::map<int, RankTrace>& ranks,
                              const GroupLabel* label, double now) {
  GroupDiagnosis g;
  g.group = group;
  for (const auto& [r, t] : ranks) g.size = std::max(g.size, r + 1);
  label_group(g, label);
  const WorldRank world{ranks, label};
  const auto [frontier, last_issued] = frontier_and_last(ranks);
  if (!frontier) {
    if (last_issued == 0) return g;  // a group that ran nothing: not worth a line
    g.lines.push_back(g.label + ": every rank finished collective #" +
                      std::to_string(last_issued) + "; none in flight");
    return g;
  }
  g.stuck = true;
  g.seq = frontier;
  const TraceEntry* sample = nullptr;
  std::map<std::string, std::vector<int>> kinds;  // what each entered as #frontier
  std::vector<int> behind;  // group ranks that never entered it
  double waiting_since = now;
  for (const auto& [r, t] : ranks) {
    const TraceEntry* e = t.find(frontier);
    if (t.issued < frontier || !e) {
      behind.push_back(r);
      continue;
    }
    if (!sample) sample = e;
    kinds[op_kind(e->op)].push_back(world(r));
    if (!done(*e)) {
      g.waiting.push_back(world(r));
      waiting_since = std::min(waiting_since, e->started_at > 0 ? e->started_at : e->queued_at);
      if (e->peer >= 0) g.waited_for.push_back(world(e->peer));
    }
  }
  for (int r : behind) g.behind.push_back(world(r));
  g.op = sample ? sample->op : "?";
  std::vector<std::string> parts;
  for (int r : behind) parts.push_back(never_entered(ranks.at(r), world(r), now));
  if (kinds.size() > 1) {
    std::string mismatch = "the ranks disagree on what #" + std::to_string(frontier) + " is:";
    for (const auto& [kind, rs] : kinds) mismatch += " " + ranks_text(rs) + " in " + kind + ";";
    mismatch.pop_back();
    parts.push_back(mismatch);
  }
  if (!g.waiting.empty()) parts.push_back(waiting_text(g, ranks, world, waiting_since, now));
  const std::string where = (g.label.rfind("group ", 0) == 0 ? "" : "the ") + g.label;
  std::string line = op_kind(g.op) + " #" + std::to_string(frontier) + " in " + where + ":";
  for (size_t i = 0; i < parts.size(); ++i) line += (i ? "; " : " ") + parts[i];
  g.lines.push_back(line);
  return g;
}

}  // namespace

std::string members_text(const std::vector<int>& ranks) {
  std::string out = "{";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (i ? "," : "") + std::to_string(ranks[i]);
    if (j - i >= 2) out += "-" + std::to_string(ranks[j]);
    else if (j == i + 1) out += "," + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out + "}";
}

std::string ranks_text(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  const bool contiguous = !ranks.empty() && ranks.back() - ranks.front() + 1 ==
                                                static_cast<int>(ranks.size());
  if (contiguous && ranks.size() > 2)
    return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

bool Diagnosis::stuck() const {
  return std::any_of(groups.begin(), groups.end(), [](const GroupDiagnosis& g) { return g.stuck; });
}

std::string Diagnosis::text() const {
  if (traces == 0) return "no collective traces (the job ran no collective, or ran without the profiler)";
  std::string out;
  for (const GroupDiagnosis& g : groups)
    if (g.stuck || !stuck())
      for (const std::string& l : g.lines) out += l + "\n";
  return out;
}

nlohmann::json Diagnosis::json() const {
  nlohmann::json gs = nlohmann::json::array();
  for (const GroupDiagnosis& g : groups)
    gs.push_back({{"group", g.group}, {"dimension", g.dimension}, {"ranks", g.ranks},
                  {"label", g.label}, {"size", g.size}, {"stuck", g.stuck}, {"seq", g.seq},
                  {"op", g.op}, {"waiting", g.waiting}, {"behind", g.behind},
                  {"waited_for", g.waited_for}, {"lines", g.lines}});
  return {{"traces", traces}, {"stuck", stuck()}, {"groups", gs}};
}

Diagnosis diagnose(const std::string& dir, double now) {
  Diagnosis d;
  std::map<std::string, std::map<int, RankTrace>> groups;
  std::error_code ec;
  size_t seen = 0;
  for (auto it = fs::directory_iterator(dir, ec);
       !ec && it != fs::directory_iterator() && ++seen <= kMaxTraceDirEntries; it.increment(ec)) {
    if (it->path().extension() != ".trace") continue;
    TraceFile f;
    const job::JobFileRead read = job::read_job_file_range(it->path().string(), 0, sizeof(f));
    if (!read.ok() || read.bytes.size() != sizeof(f)) continue;
    std::memcpy(&f, read.bytes.data(), sizeof(f));
    if (std::memcmp(f.magic, comm::kTraceMagic, sizeof(f.magic)) != 0) continue;
    f.group[sizeof(f.group) - 1] = '\0';
    RankTrace t;
    t.rank = f.rank;
    t.world_rank = f.world_rank;
    t.pid = f.pid;
    t.issued = f.issued;
    for (TraceEntry& e : f.entries) {
      if (e.seq == 0 || e.state == static_cast<int32_t>(TraceState::kEmpty)) continue;
      e.op[sizeof(e.op) - 1] = '\0';
      t.entries.push_back(e);
    }
    std::sort(t.entries.begin(), t.entries.end(),
              [](const TraceEntry& a, const TraceEntry& b) { return a.seq < b.seq; });
    ++d.traces;
    groups[f.group][f.rank] = std::move(t);
  }
  std::set<int> world_ranks;
  for (const auto& [group, ranks] : groups)
    for (const auto& [r, t] : ranks) world_ranks.insert(t.world_rank);
  const std::map<std::string, GroupLabel> labels = read_labels(dir, world_ranks);
  for (const auto& [group, ranks] : groups) {
    auto l = labels.find(group);
    d.groups.push_back(diagnose_group(group, ranks, l == labels.end() ? nullptr : &l->second, now));
  }
  return d;
}

}  // namespace heft::profile
