#include "heft/parallel/sharded/sharded_checkpoint.h"

#include <nlohmann/json.hpp>

#include <sstream>

#include "heft/error.h"

namespace heft::parallel::sharded {

namespace {

using json = nlohmann::json;

std::string key_of(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

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

std::map<std::string, std::string> save_shards(ShardedDataParallel& sdp,
                                               torch::optim::Optimizer& optimizer,
                                               const std::string& optimizer_name,
                                               int replicate_rank) {
  torch::serialize::OutputArchive archive;
  json flats = json::array();
  for (size_t f = 0; f < sdp.shards().size(); ++f) {
    const std::string prefix = "f" + std::to_string(f) + ".";
    archive.write(prefix + "param", sdp.shards()[f].detach());
    int64_t step = 0;
    for (const auto& [name, t] : state_of(optimizer, sdp.shards()[f], &step)) archive.write(prefix + name, t);
    archive.write(prefix + "step", torch::tensor({step}, torch::kLong));
    const FlatInfo& info = sdp.flats()[f];
    json members = json::array();
    for (const FlatMember& m : info.members)
      members.push_back({{"name", m.name}, {"shape", m.shape}, {"offset", m.offset}, {"numel", m.numel}});
    flats.push_back({{"unit", info.unit}, {"group", info.group}, {"numel", info.numel},
                     {"shard_numel", info.shard_numel}, {"members", members}});
  }
  std::ostringstream bytes;
  archive.save_to(bytes);
  const json layout = {{"format", "heft-sharded"},
                       {"version", 1},
                       {"optimizer", optimizer_name},
                       {"shard_size", sdp.shard_group().size()},
                       {"shard_rank", sdp.shard_group().rank()},
                       {"replicate_rank", replicate_rank},
                       {"flats", flats}};
  return {{"shard.pt", bytes.str()}, {"layout.json", layout.dump()}};
}

bool is_sharded_checkpoint(const std::vector<std::map<std::string, std::string>>& parts) {
  return !parts.empty() && parts[0].count("layout.json") && parts[0].count("shard.pt");
}

NamedState read_sharded(const std::vector<std::map<std::string, std::string>>& parts,
                        const std::string& where) {
  // Replicate 0's parts by shard rank.
  std::map<int, const std::map<std::string, std::string>*> by_shard;
  json layout;
  int shard_size = 0;
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
    by_shard[l.value("shard_rank", -1)] = &p;
    shard_size = l.value("shard_size", 0);
    if (layout.is_null()) layout = l;
  }
  if (shard_size <= 0 || static_cast<int>(by_shard.size()) != shard_size ||
      by_shard.begin()->first != 0 || by_shard.rbegin()->first != shard_size - 1)
    throw IoError("checkpoint " + where + ": expected the shards 0.." +
                  std::to_string(shard_size - 1) + " of replicate 0, found " +
                  std::to_string(by_shard.size()));
  std::vector<torch::serialize::InputArchive> archives(static_cast<size_t>(shard_size));
  for (auto& [k, p] : by_shard) {
    std::istringstream in(p->at("shard.pt"));
    archives[static_cast<size_t>(k)].load_from(in);
  }
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
    if (archives[0].try_read(prefix + "step", step)) state.adam_step = std::max(state.adam_step, step.item<int64_t>());
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
      state.params[name] = param.narrow(0, offset, numel).view(shape).clone();
      for (const auto& [s, t] : states)
        state.optimizer[name][s] = t.narrow(0, offset, numel).view(shape).clone();
    }
  }
  return state;
}

namespace {

// Every name and shape of `expected` is in `state` (InvalidArgument naming the first that
// is not), and the optimizer matches.
void check(const NamedState& state, const std::map<std::string, std::vector<int64_t>>& expected,
           const std::string& optimizer_name) {
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
  if (state.params.size() != expected.size())
    throw InvalidArgument("checkpoint: it has " + std::to_string(state.params.size()) +
                          " parameters, the model " + std::to_string(expected.size()) +
                          " (a checkpoint of another model?)");
  if (!state.optimizer.empty() && state.optimizer_name != optimizer_name)
    throw InvalidArgument("checkpoint: its optimizer is " + state.optimizer_name +
                          ", this run's is " + optimizer_name);
}

}  // namespace

void load_named_state(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state) {
  std::map<std::string, std::vector<int64_t>> expected;
  for (const FlatInfo& f : sdp.flats())
    for (const FlatMember& m : f.members) expected[m.name] = m.shape;
  check(state, expected, optimizer_name);
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
                      const std::string& optimizer_name, const NamedState& state) {
  std::map<std::string, std::vector<int64_t>> expected;
  const auto named = module.named_parameters();
  for (const auto& item : named) expected[item.key()] = item.value().sizes().vec();
  check(state, expected, optimizer_name);
  torch::NoGradGuard no_grad;
  for (const auto& item : named) {
    torch::Tensor p = item.value();
    p.copy_(state.params.at(item.key()));
    if (const auto it = state.optimizer.find(item.key()); it != state.optimizer.end())
      set_state(optimizer, optimizer_name, p, it->second, state.adam_step);
  }
}

}  // namespace heft::parallel::sharded
