#include "heft/parallel/sharded/sharded_checkpoint.h"

#include <nlohmann/json.hpp>

#include <sstream>
#include <type_traits>
#include <utility>

#include "heft/error.h"
#include "heft/parallel/checkpoint_dir.h"
#include "heft/parallel/torch_state.h"

namespace heft::parallel::sharded {

namespace {

using json = nlohmann::json;

// The optimizer keys its per-parameter state by the parameter's TensorImpl (its key type,
// read from the optimizer, was a string of the address before LibTorch 2.x).
using StateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
StateKey key_of(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }

// The optimizer's state tensors of parameter p by name; empty before its first step.
std::map<std::string, torch::Tensor> state_of(torch::optim::Optimizer& optimizer,
                                              const torch::Tensor& p, int64_t* adam_step) {
  std::map<std::string, torch::Tensor> out;
  const auto it = optimizer.state().find(key_of(p));
  if (it == optimizer.state().end()) return out;
  if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
    out["exp_avg"] = a->exp_avg();
    out["exp_avg_sq"] = a->exp_avg_sq();
    if (adam_step) *adam_step = a->step();
  } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
    if (m->momentum_buffer().defined()) out["momentum_buffer"] = m->momentum_buffer();
  }
  return out;
}

// Replaces p's optimizer state with `tensors` (copies).
void set_state(torch::optim::Optimizer& optimizer, const std::string& name,
               const torch::Tensor& p, const std::map<std::string, torch::Tensor>& tensors,
               int64_t adam_step) {
  if (tensors.empty()) return;
  if (name == "adamw") {
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(adam_step);
    s->exp_avg(tensors.at("exp_avg").clone());
    s->exp_avg_sq(tensors.at("exp_avg_sq").clone());
    optimizer.state()[key_of(p)] = std::move(s);
  } else {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(tensors.at("momentum_buffer").clone());
    optimizer.state()[key_of(p)] = std::move(s);
  }
}

const char* const kStateNames[] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};

std::string shape_text(at::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

namespace {

// One flat of a part: its shard tensor, optimizer state and layout entry.
struct PartFlat {
  torch::Tensor param;  // this rank's shard (1-D)
  std::map<std::string, torch::Tensor> state;
  int64_t step = 0;
  FlatInfo info;
};

std::map<std::string, std::string> write_part(const std::vector<PartFlat>& flats,
                                              const std::string& optimizer_name, int shard_size,
                                              int shard_rank, int replicate_rank,
                                              const TensorLayout& tensor, int pipeline_rank = 0) {
  torch::serialize::OutputArchive archive;
  json entries = json::array();
  for (size_t f = 0; f < flats.size(); ++f) {
    const std::string prefix = "f" + std::to_string(f) + ".";
    archive.write(prefix + "param", flats[f].param);
    for (const auto& [name, t] : flats[f].state) archive.write(prefix + name, t.reshape({-1}));
    archive.write(prefix + "step", torch::tensor({flats[f].step}, torch::kLong));
    const FlatInfo& info = flats[f].info;
    json members = json::array();
    for (const FlatMember& m : info.members) {
      const tensor::Split s = tensor.split_of(m.name);
      members.push_back({{"name", m.name}, {"shape", m.shape}, {"offset", m.offset},
                         {"numel", m.numel}, {"split", {s.dim, s.parts}}});
    }
    entries.push_back({{"unit", info.unit}, {"group", info.group}, {"numel", info.numel},
                       {"shard_numel", info.shard_numel}, {"members", members}});
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  const json layout = {{"format", "heft-sharded"},  {"version", 1},
                       {"optimizer", optimizer_name}, {"shard_size", shard_size},
                       {"shard_rank", shard_rank},  {"replicate_rank", replicate_rank},
                       {"tensor_size", tensor.size}, {"tensor_rank", tensor.rank},
                       {"pipeline_rank", pipeline_rank}, {"flats", entries}};
  return {{"shard.pt", bytes.str()}, {"layout.json", layout.dump()}};
}

}  // namespace

std::map<std::string, std::string> save_shards(ShardedDataParallel& sdp,
                                               torch::optim::Optimizer& optimizer,
                                               const std::string& optimizer_name,
                                               int replicate_rank, const TensorLayout& tensor,
                                               int pipeline_rank) {
  std::vector<PartFlat> flats;
  for (size_t f = 0; f < sdp.shards().size(); ++f) {
    PartFlat p;
    p.param = sdp.shards()[f].detach();
    p.state = state_of(optimizer, sdp.shards()[f], &p.step);
    p.info = sdp.flats()[f];
    flats.push_back(std::move(p));
  }
  return write_part(flats, optimizer_name, sdp.shard_group().size(), sdp.shard_group().rank(),
                    replicate_rank, tensor, pipeline_rank);
}

std::map<std::string, std::string> save_replica(torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer,
                                                const std::string& optimizer_name,
                                                int replicate_rank, const TensorLayout& tensor,
                                                int pipeline_rank) {
  std::vector<PartFlat> flats;
  for (const auto& item : module.named_parameters()) {
    PartFlat p;
    p.param = item.value().detach().reshape({-1});
    p.state = state_of(optimizer, item.value(), &p.step);
    p.info.numel = p.info.shard_numel = item.value().numel();
    p.info.members.push_back({item.key(), item.value().sizes().vec(), 0, item.value().numel()});
    flats.push_back(std::move(p));
  }
  return write_part(flats, optimizer_name, 1, 0, replicate_rank, tensor, pipeline_rank);
}

bool is_sharded_checkpoint(const std::vector<std::map<std::string, std::string>>& parts) {
  return !parts.empty() && parts[0].count("layout.json") && parts[0].count("shard.pt");
}

namespace {

// The named state of one tensor rank from its replicate-0 parts (any shard size).
NamedState read_tensor_rank(const std::map<int, const std::map<std::string, std::string>*>& by_shard,
                            const json& layout, int shard_size, const std::string& where,
                            std::map<std::string, tensor::Split>* splits) {
  if (shard_size <= 0 || static_cast<int>(by_shard.size()) != shard_size ||
      by_shard.begin()->first != 0 || by_shard.rbegin()->first != shard_size - 1)
    throw IoError("checkpoint " + where + ": expected the shards 0.." +
                  std::to_string(shard_size - 1) + " of replicate 0, found " +
                  std::to_string(by_shard.size()));
  std::vector<torch::serialize::InputArchive> archives(static_cast<size_t>(shard_size));
  for (auto& [k, p] : by_shard)
    load_plain_archive(archives[static_cast<size_t>(k)], p->at("shard.pt"),
                       "checkpoint " + where + ": shard.pt of shard rank " + std::to_string(k));
  NamedState state;
  state.optimizer_name = layout.value("optimizer", "");
  const json& flats = layout["flats"];
  for (size_t f = 0; f < flats.size(); ++f) {
    const std::string prefix = "f" + std::to_string(f) + ".";
    auto concat = [&](const std::string& what) -> torch::Tensor {
      std::vector<torch::Tensor> pieces;
      for (auto& a : archives) {
        torch::Tensor t;
        if (!a.try_read(prefix + what, t)) return {};
        pieces.push_back(t);
      }
      return torch::cat(pieces);
    };
    torch::Tensor step;
    if (archives[0].try_read(prefix + "step", step))
      state.adam_step = std::max(state.adam_step, step.item<int64_t>());
    const torch::Tensor param = concat("param");
    if (!param.defined())
      throw IoError("checkpoint " + where + ": shard.pt has no " + prefix + "param");
    std::map<std::string, torch::Tensor> states;
    for (const char* s : kStateNames)
      if (torch::Tensor t = concat(s); t.defined()) states[s] = t;
    for (const json& m : flats[f]["members"]) {
      const std::string name = m.at("name").get<std::string>();
      const std::vector<int64_t> shape = m.at("shape").get<std::vector<int64_t>>();
      const int64_t offset = m.at("offset").get<int64_t>(), numel = m.at("numel").get<int64_t>();
      if (offset + numel > param.numel())
        throw IoError("checkpoint " + where + ": parameter " + name + " lies outside its shards");
      if (m.contains("split") && m["split"].is_array() && m["split"].size() == 2)
        (*splits)[name] = {m["split"][0].get<int>(), m["split"][1].get<int>()};
      state.params[name] = param.narrow(0, offset, numel).view(shape).clone();
      for (const auto& [s, t] : states)
        state.optimizer[name][s] = t.narrow(0, offset, numel).view(shape).clone();
    }
  }
  return state;
}

}  // namespace

namespace {

// The full state of one pipeline stage's parts (its tensor ranks joined).
NamedState read_stage(const std::map<int, std::map<int, const std::map<std::string, std::string>*>>& by_tensor,
                      const std::map<int, json>& layouts, const std::map<int, int>& shard_sizes,
                      int tensor_size, const std::string& where) {
  if (static_cast<int>(by_tensor.size()) != tensor_size)
    throw IoError("checkpoint " + where + ": expected the parts of " + std::to_string(tensor_size) +
                  " tensor ranks, found " + std::to_string(by_tensor.size()));
  std::map<std::string, tensor::Split> splits;
  std::vector<NamedState> ranks;
  for (auto& [t, shards] : by_tensor)
    ranks.push_back(read_tensor_rank(shards, layouts.at(t), shard_sizes.at(t), where, &splits));
  if (ranks.size() == 1) return ranks[0];
  NamedState full;
  full.optimizer_name = ranks[0].optimizer_name;
  full.adam_step = ranks[0].adam_step;
  for (const auto& [name, t0] : ranks[0].params) {
    const tensor::Split split = splits.count(name) ? splits[name] : tensor::Split{};
    std::vector<torch::Tensor> slices;
    for (const NamedState& r : ranks) {
      if (!r.params.count(name))
        throw IoError("checkpoint " + where + ": a tensor rank has no parameter " + name);
      slices.push_back(r.params.at(name));
    }
    full.params[name] = tensor::join_slices(slices, split);
    if (!ranks[0].optimizer.count(name)) continue;
    for (const auto& [s, unused] : ranks[0].optimizer.at(name)) {
      std::vector<torch::Tensor> pieces;
      for (const NamedState& r : ranks) pieces.push_back(r.optimizer.at(name).at(s));
      full.optimizer[name][s] = tensor::join_slices(pieces, split);
    }
  }
  return full;
}

}  // namespace

NamedState read_sharded(const std::vector<std::map<std::string, std::string>>& parts,
                        const std::string& where) {
  // Per pipeline stage, per tensor rank: replicate 0's parts by shard rank.
  struct Stage {
    std::map<int, std::map<int, const std::map<std::string, std::string>*>> by_tensor;
    std::map<int, json> layouts;
    std::map<int, int> shard_sizes;
    int tensor_size = 1;
  };
  std::map<int, Stage> stages;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    if (!p.count("layout.json") || !p.count("shard.pt"))
      throw IoError("checkpoint " + where + ": part " + std::to_string(i) +
                    " has no layout.json and shard.pt (not a sharded checkpoint)");
    const json l = json::parse(p.at("layout.json"), nullptr, false);
    if (l.is_discarded() || l.value("format", "") != "heft-sharded" || !l.contains("flats"))
      throw IoError("checkpoint " + where + ": part " + std::to_string(i) +
                    "'s layout.json is not a heft-sharded layout");
    if (l.value("replicate_rank", -1) != 0) continue;
    check_plain_archive(p.at("shard.pt"), "checkpoint " + where + ": " + part_name(static_cast<int>(i)) +
                                              "/shard.pt");
    Stage& st = stages[l.value("pipeline_rank", 0)];
    const int t = l.value("tensor_rank", 0);
    st.tensor_size = l.value("tensor_size", 1);
    st.by_tensor[t][l.value("shard_rank", -1)] = &p;
    st.shard_sizes[t] = l.value("shard_size", 0);
    if (!st.layouts.count(t)) st.layouts[t] = l;
  }
  NamedState all;
  for (auto& [s, st] : stages) {
    NamedState piece = read_stage(st.by_tensor, st.layouts, st.shard_sizes, st.tensor_size, where);
    all.optimizer_name = piece.optimizer_name;
    all.adam_step = std::max(all.adam_step, piece.adam_step);
    for (auto& [name, t] : piece.params) all.params[name] = t;
    for (auto& [name, m] : piece.optimizer) all.optimizer[name] = m;
  }
  if (all.params.empty()) throw IoError("checkpoint " + where + ": no parts of replicate 0");
  return all;
}

NamedState local_view(const NamedState& full, const TensorLayout& tensor) {
  if (tensor.size == 1) return full;
  NamedState out;
  out.optimizer_name = full.optimizer_name;
  out.adam_step = full.adam_step;
  for (const auto& [name, t] : full.params) {
    const tensor::Split s = tensor.split_of(name);
    out.params[name] = tensor::take_slice(t, s, tensor.rank, tensor.size, "parameter " + name).contiguous();
    if (const auto it = full.optimizer.find(name); it != full.optimizer.end())
      for (const auto& [k, v] : it->second)
        out.optimizer[name][k] = tensor::take_slice(v, s, tensor.rank, tensor.size, "parameter " + name).contiguous();
  }
  return out;
}

namespace {

// Every name and shape of `expected` is in `state` (InvalidArgument naming the first that
// is not), and the optimizer matches.
void check(const NamedState& state, const std::map<std::string, std::vector<int64_t>>& expected,
           const std::string& optimizer_name, bool subset = false) {
  for (const auto& [name, shape] : expected) {
    const auto it = state.params.find(name);
    if (it == state.params.end())
      throw InvalidArgument("checkpoint: no parameter " + name +
                            " (a checkpoint of another model?)");
    if (it->second.sizes().vec() != shape)
      throw InvalidArgument("checkpoint: parameter " + name + " has shape " +
                            shape_text(it->second.sizes()) + ", the model's is " +
                            shape_text(shape) + " (another n_embd, n_layer, block_size?)");
  }
  if (!subset && state.params.size() != expected.size())
    throw InvalidArgument("checkpoint: it has " + std::to_string(state.params.size()) +
                          " parameters, the model " + std::to_string(expected.size()) +
                          " (a checkpoint of another model?)");
  if (!state.optimizer.empty() && state.optimizer_name != optimizer_name)
    throw InvalidArgument("checkpoint: its optimizer is " + state.optimizer_name +
                          ", this run's is " + optimizer_name);
}

}  // namespace

void load_named_state(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state, bool subset) {
  std::map<std::string, std::vector<int64_t>> expected;
  for (const FlatInfo& f : sdp.flats())
    for (const FlatMember& m : f.members) expected[m.name] = m.shape;
  check(state, expected, optimizer_name, subset);
  sdp.load_full_parameters(state.params);
  if (state.optimizer.empty()) return;
  for (size_t f = 0; f < sdp.shards().size(); ++f) {
    std::map<std::string, torch::Tensor> slices;
    for (const char* s : kStateNames) {
      std::map<std::string, torch::Tensor> by_name;
      for (const FlatMember& m : sdp.flats()[f].members) {
        const auto& per = state.optimizer.at(m.name);
        if (per.count(s)) by_name[m.name] = per.at(s);
      }
      if (by_name.size() == sdp.flats()[f].members.size())
        slices[s] = sdp.my_slice(f, sdp.flatten(f, by_name));
    }
    set_state(optimizer, optimizer_name, sdp.shards()[f], slices, state.adam_step);
  }
}

void load_named_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state, bool subset) {
  std::map<std::string, std::vector<int64_t>> expected;
  const auto named = module.named_parameters();
  for (const auto& item : named) expected[item.key()] = item.value().sizes().vec();
  check(state, expected, optimizer_name, subset);
  torch::NoGradGuard no_grad;
  for (const auto& item : named) {
    torch::Tensor p = item.value();
    p.copy_(state.params.at(item.key()));
    if (const auto it = state.optimizer.find(item.key()); it != state.optimizer.end())
      set_state(optimizer, optimizer_name, p, it->second, state.adam_step);
  }
}

}  // namespace heft::parallel::sharded
