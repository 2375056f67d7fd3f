// search() and describe(): the enumeration, the limit, the ranking and the table.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "heft/error.h"
#include "heft/parallel/layout/layout_search.h"

namespace heft::parallel::layout {

namespace {

// "optimizer_state 1.2 GB, activations 640.0 MB, ...": the parts, largest first (`most` of
// them; the rest summed as "other").
std::string largest_parts(const Prediction& p, size_t most) {
  std::vector<MemoryPart> parts = p.memory_parts;
  std::stable_sort(parts.begin(), parts.end(), [](const MemoryPart& a, const MemoryPart& b) { return a.bytes > b.bytes; });
  std::string out;
  int64_t other = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].bytes <= 0) continue;
    if (i >= most) {
      other += parts[i].bytes;
      continue;
    }
    out += (out.empty() ? "" : ", ") + parts[i].name + " " + format_bytes(parts[i].bytes);
  }
  if (other > 0) out += ", other " + format_bytes(other);
  return out;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

void check_options(const ModelCost& model, const SearchOptions& o) {
  if (o.world < 1) throw InvalidArgument("world: expected at least 1 rank, found " + std::to_string(o.world));
  if (o.memory_limit_bytes <= 0)
    throw InvalidArgument("memory_limit: expected a positive number of bytes, found " +
                          std::to_string(o.memory_limit_bytes));
  if (o.global_batch < 1)
    throw InvalidArgument("global_batch: expected at least 1 sample, found " + std::to_string(o.global_batch));
  if (model.layers.empty()) throw InvalidArgument("layers: expected at least one layer, found none");
  if (!model.saved_bytes.empty() && model.saved_bytes.size() != model.layers.size())
    throw InvalidArgument("saved_bytes: expected one per layer (" + std::to_string(model.layers.size()) +
                          ") or none, found " + std::to_string(model.saved_bytes.size()));
  for (const std::vector<double>* v : {&model.forward_fixed_s, &model.backward_fixed_s})
    if (!v->empty() && v->size() != model.layers.size())
      throw InvalidArgument("forward_fixed_s, backward_fixed_s: expected one per layer (" +
                            std::to_string(model.layers.size()) + ") or none, found " + std::to_string(v->size()));
  if (model.profiled_batch < 1)
    throw InvalidArgument("profiled_batch: expected at least 1 sample, found " + std::to_string(model.profiled_batch));
}

std::vector<Layout> enumerate(const SearchOptions& o) {
  std::vector<Layout> out;
  std::vector<int> data = divisors(o.world);
  std::reverse(data.begin(), data.end());  // the most data replicas first
  for (int d : data)
    for (int s : divisors(o.world / d))
      for (int t : divisors(o.world / d / s)) {
        const int p = o.world / d / s / t;
        for (int m : o.microbatches)
          for (int v : o.virtual_stages) {
            if (v > 1 && p == 1) continue;  // no chunks to interleave
            for (bool ckpt : o.checkpointing) {
              Layout l;
              l.data = d, l.sharded = s, l.tensor = t, l.pipeline = p;
              l.microbatches = m, l.virtual_stages = v, l.checkpointing = ckpt;
              out.push_back(l);
            }
          }
      }
  return out;
}

}  // namespace

SearchResult search(const ModelCost& model, const CommTable& comm, const SearchOptions& o) {
  check_options(model, o);
  SearchResult r;
  const Prediction* smallest = nullptr;
  std::vector<Prediction> over;  // priced but over the limit
  for (const Layout& l : enumerate(o)) {
    try {
      Prediction p = evaluate(model, comm, o, l);
      if (p.memory_bytes > o.memory_limit_bytes) {
        r.dropped.push_back({l, "memory " + format_bytes(p.memory_bytes) + " > limit " +
                                    format_bytes(o.memory_limit_bytes), p.memory_bytes});
        over.push_back(std::move(p));
      } else {
        r.ranked.push_back(std::move(p));
      }
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).rfind("comm_table", 0) == 0) throw;  // the inputs, not the layout
      r.dropped.push_back({l, e.what(), 0});
    }
  }
  if (r.ranked.empty()) {
    for (const Prediction& p : over)
      if (!smallest || p.memory_bytes < smallest->memory_bytes) smallest = &p;
    if (!smallest)
      throw InvalidArgument("layout: no layout of world " + std::to_string(o.world) + " is possible: " +
                            (r.dropped.empty() ? std::string("none enumerated") : r.dropped.front().reason));
    throw InvalidArgument("memory_limit: no layout fits " + format_bytes(o.memory_limit_bytes) +
                          " per rank; the smallest needs " + format_bytes(smallest->memory_bytes) + " (" +
                          to_string(smallest->layout) + "), largest parts first: " + largest_parts(*smallest, 4));
  }
  // Enumeration order is the tie-break: stable_sort keeps it for equal times.
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [](const Prediction& a, const Prediction& b) { return a.step_s < b.step_s; });
  return r;
}

std::string describe(const SearchResult& result, int top, int dropped) {
  std::ostringstream os;
  char buf[320];
  os << result.ranked.size() << " feasible layouts (fastest first), " << result.dropped.size() << " dropped\n";
  os << "rank  step ms  compute ms  bubble  grad comm ms  tensor comm ms  memory/rank  w/o profile  layout\n";
  const int n = std::min<int>(top, static_cast<int>(result.ranked.size()));
  for (int i = 0; i < n; ++i) {
    const Prediction& p = result.ranked[static_cast<size_t>(i)];
    std::snprintf(buf, sizeof buf, "%4d  %7.2f  %10.2f  %6.3f  %12.2f  %14.2f  %11s  %11s  %s\n", i + 1,
                  p.step_s * 1e3, p.compute_s * 1e3, p.bubble, p.gradient_comm_s * 1e3, p.tensor_comm_s * 1e3,
                  format_bytes(p.memory_bytes).c_str(), format_bytes(p.unprofiled_memory_bytes).c_str(),
                  to_string(p.layout).c_str());
    os << buf;
  }
  if (n > 0) os << "memory/rank by component, largest first:\n";
  for (int i = 0; i < std::min(n, 3); ++i)
    os << "  " << i + 1 << ": " << largest_parts(result.ranked[static_cast<size_t>(i)], 6) << "\n";
  const size_t shown = dropped < 0 ? result.dropped.size() : std::min(result.dropped.size(), static_cast<size_t>(dropped));
  if (shown > 0) os << "dropped:\n";
  for (size_t i = 0; i < shown; ++i)
    os << "  " << to_string(result.dropped[i].layout) << ": " << result.dropped[i].reason << "\n";
  if (shown < result.dropped.size())
    os << "(" << result.dropped.size() - shown << " dropped layouts not shown: heft plan lists each with its reason)\n";
  return os.str();
}

}  // namespace heft::parallel::layout
