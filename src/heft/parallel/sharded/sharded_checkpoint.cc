#include "heft/parallel/sharded/sharded_checkpoint.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
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
    s->exp_avg(tensors.at("exp_avg").to(p.device(), /*non_blocking=*/false, /*copy=*/true));
    s->exp_avg_sq(tensors.at("exp_avg_sq").to(p.device(), false, true));
    optimizer.state()[key_of(p)] = std::move(s);
  } else {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(tensors.at("momentum_buffer").to(p.device(), false, true));
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

std::string unit_file(size_t f) {
  char name[32];
  std::snprintf(name, sizeof name, "unit-%05zu.pt", f);
  return name;
}

}  // namespace

PartTensors part_tensors(const std::vector<SavedFlat>& flats, const PartHeader& header) {
  const json extra = json::parse(header.extra_json, nullptr, false);
  if (extra.is_discarded() || !extra.is_object())
    throw InvalidArgument("checkpoint: extra_json must be a JSON object, got " + header.extra_json);
  PartTensors part;
  json entries = json::array();
  for (size_t f = 0; f < flats.size(); ++f) {
    const SavedFlat& flat = flats[f];
    // On the CPU, whatever device trained (a checkpoint loads on any machine).
    std::map<std::string, torch::Tensor> tensors{
        {"param", flat.param.detach().reshape({-1}).to(torch::kCPU)},
        {"step", torch::tensor({flat.step}, torch::kLong)}};
    json state = json::array();
    for (const auto& [name, t] : flat.state) {
      if (name == "param" || name == "step")
        throw InvalidArgument("checkpoint: optimizer state may not be named " + name);
      if (t.numel() != flat.param.numel())
        throw InvalidArgument("checkpoint: optimizer state " + name + " of flat " +
                              std::to_string(f) + " has " + std::to_string(t.numel()) +
                              " elements, its shard " + std::to_string(flat.param.numel()));
      tensors[name] = t.detach().reshape({-1}).to(torch::kCPU);
      state.push_back(name);
    }
    part.files[unit_file(f)] = std::move(tensors);
    const FlatInfo& info = flat.info;
    json members = json::array();
    for (const FlatMember& m : info.members) {
      const tensor::Split s = header.tensor.split_of(m.name);
      json entry = {{"name", m.name}, {"shape", m.shape}, {"offset", m.offset},
                    {"numel", m.numel}, {"split", {s.dim, s.parts}}};
      if (const auto it = flat.aliases.find(m.name); it != flat.aliases.end() && !it->second.empty())
        entry["aliases"] = it->second;
      members.push_back(std::move(entry));
    }
    entries.push_back({{"unit", info.unit}, {"group", info.group}, {"numel", info.numel},
                       {"shard_numel", info.shard_numel}, {"state", state},
                       {"members", members}});
  }
  json layout = {{"format", "heft-sharded"},
                 {"version", 2},
                 {"optimizer", header.optimizer_name},
                 {"shard_size", header.shard_size},
                 {"shard_rank", header.shard_rank},
                 {"replicate_rank", header.replicate_rank},
                 {"tensor_size", header.tensor.size},
                 {"tensor_rank", header.tensor.rank},
                 {"pipeline_rank", header.pipeline_rank},
                 {"flats", entries},
                 {"extra", extra}};
  if (!header.buffers.empty()) {
    json names = json::array();
    for (const auto& [name, t] : header.buffers) names.push_back(name);
    layout["buffers"] = names;
    part.files["replicated.pt"] = header.buffers;
  }
  part.layout_json = layout.dump();
  return part;
}

std::map<std::string, std::string> write_part(const PartTensors& part) {
  std::map<std::string, std::string> files;
  for (const auto& [file, tensors] : part.files) files[file] = tensors_to_pickle(tensors);
  files["layout.json"] = part.layout_json;
  return files;
}

std::map<std::string, std::string> write_part(const std::vector<SavedFlat>& flats,
                                              const PartHeader& header) {
  return write_part(part_tensors(flats, header));
}

// copy_part's form: an 8-byte length, then CBOR {"layout": layout.json's text, "tensors":
// [[file, name, dtype, shape, bytes], ..]}, then each tensor's bytes in that order.
std::string copy_part(const PartTensors& part) {
  std::string out;
  copy_part(part, &out);
  return out;
}

void copy_part(const PartTensors& part, std::string* out) {
  json index = json::array();
  std::vector<torch::Tensor> order;
  size_t total = 0;
  for (const auto& [file, tensors] : part.files)
    for (const auto& [name, t] : tensors) {
      torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
      index.push_back({file, name, static_cast<int>(c.scalar_type()), c.sizes().vec(), c.nbytes()});
      total += c.nbytes();
      order.push_back(std::move(c));
    }
  const std::vector<uint8_t> meta = json::to_cbor(json{{"layout", part.layout_json}, {"tensors", index}});
  const uint64_t meta_size = meta.size();
  // A buffer reused is already resident and mostly of this size: only growth is zero-filled.
  out->resize(sizeof meta_size + meta.size() + total);
  char* at = out->data();
  std::memcpy(at, &meta_size, sizeof meta_size);
  std::memcpy(at += sizeof meta_size, meta.data(), meta.size());
  at += meta.size();
  for (const torch::Tensor& t : order) {
    std::memcpy(at, t.data_ptr(), t.nbytes());
    at += t.nbytes();
  }
}

std::map<std::string, std::string> files_from_copy(const std::string& copy, const std::string& what) {
  uint64_t meta_size = 0;
  if (copy.size() < sizeof meta_size || (std::memcpy(&meta_size, copy.data(), sizeof meta_size),
                                         meta_size > copy.size() - sizeof meta_size))
    throw IoError(what + ": a part's copy of " + std::to_string(copy.size()) + " bytes is truncated");
  const char* meta = copy.data() + sizeof meta_size;
  json index;
  try {
    index = json::from_cbor(meta, meta + meta_size);
  } catch (const json::exception& e) {
    throw IoError(what + ": a part's copy has no index (" + e.what() + ")");
  }
  PartTensors part;
  part.layout_json = index.at("layout").get<std::string>();
  size_t at = sizeof meta_size + meta_size;
  for (const json& e : index.at("tensors")) {
    const size_t bytes = e.at(4).get<size_t>();
    if (bytes > copy.size() - at)
      throw IoError(what + ": a part's copy ends inside tensor " + e.at(1).get<std::string>() + " of " +
                    e.at(0).get<std::string>());
    torch::Tensor t = torch::empty(e.at(3).get<std::vector<int64_t>>(),
                                   torch::TensorOptions().dtype(static_cast<c10::ScalarType>(e.at(2).get<int>())));
    if (t.nbytes() != bytes)
      throw IoError(what + ": a part's copy gives tensor " + e.at(1).get<std::string>() + " " +
                    std::to_string(bytes) + " bytes for its shape's " + std::to_string(t.nbytes()));
    std::memcpy(t.data_ptr(), copy.data() + at, bytes);
    at += bytes;
    part.files[e.at(0).get<std::string>()][e.at(1).get<std::string>()] = std::move(t);
  }
  return write_part(part);
}

PartTensors shards_part(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                        const std::string& optimizer_name, int replicate_rank, const TensorLayout& tensor,
                        int pipeline_rank) {
  std::vector<SavedFlat> flats;
  for (size_t f = 0; f < sdp.shards().size(); ++f) {
    SavedFlat p;
    p.param = sdp.shards()[f].detach();
    for (auto& [name, t] : state_of(optimizer, sdp.shards()[f], &p.step))
      p.state[name] = t;
    p.info = sdp.flats()[f];
    flats.push_back(std::move(p));
  }
  PartHeader h;
  h.optimizer_name = optimizer_name;
  h.shard_size = sdp.shard_group().size();
  h.shard_rank = sdp.shard_group().rank();
  h.replicate_rank = replicate_rank;
  h.tensor = tensor;
  h.pipeline_rank = pipeline_rank;
  return part_tensors(flats, h);
}

PartTensors replica_part(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                         const std::string& optimizer_name, int replicate_rank, const TensorLayout& tensor,
                         int pipeline_rank) {
  std::vector<SavedFlat> flats;
  for (const auto& item : module.named_parameters()) {
    SavedFlat p;
    p.param = item.value().detach().reshape({-1});
    for (auto& [name, t] : state_of(optimizer, item.value(), &p.step))
      p.state[name] = t.reshape({-1});
    p.info.numel = p.info.shard_numel = item.value().numel();
    p.info.members.push_back({item.key(), item.value().sizes().vec(), 0, item.value().numel()});
    flats.push_back(std::move(p));
  }
  PartHeader h;
  h.optimizer_name = optimizer_name;
  h.replicate_rank = replicate_rank;
  h.tensor = tensor;
  h.pipeline_rank = pipeline_rank;
  return part_tensors(flats, h);
}

std::map<std::string, std::string> save_shards(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                                               const std::string& optimizer_name, int replicate_rank,
                                               const TensorLayout& tensor, int pipeline_rank) {
  return write_part(shards_part(sdp, optimizer, optimizer_name, replicate_rank, tensor, pipeline_rank));
}

std::map<std::string, std::string> save_replica(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                                const std::string& optimizer_name, int replicate_rank,
                                                const TensorLayout& tensor, int pipeline_rank) {
  return write_part(replica_part(module, optimizer, optimizer_name, replicate_rank, tensor, pipeline_rank));
}

namespace {

// A part of a sharded checkpoint (either version): its layout.json names the format (a flat-less
// part has no unit files; version 1's always carried shard.pt).
bool is_sharded_part(const std::map<std::string, std::string>& part) {
  const auto layout = part.find("layout.json");
  return layout != part.end() &&
         (part.count("shard.pt") || layout->second.find("\"heft-sharded\"") != std::string::npos);
}

}  // namespace

bool is_sharded_checkpoint(const std::vector<std::map<std::string, std::string>>& parts) {
  return !parts.empty() && is_sharded_part(parts[0]);
}

// One part as the reader sees it: its layout and its files, by name, read on demand.
struct ShardedReader::PartView {
  json layout;
  std::function<std::string(const std::string&)> file;   // bytes; throws IoError if absent
  std::function<std::string(const std::string&)> label;  // a file's name in messages
  std::function<bool(const std::string&)> has;
};

namespace {

using PartView = ShardedReader::PartView;

// The flats' tensors of one tensor rank's parts (by shard rank), flat by flat.
class ShardSet {
 public:
  ShardSet(std::vector<const PartView*> parts, int version) : parts_(std::move(parts)), version_(version) {
    if (version_ == 1) {
      archives_.resize(parts_.size());
      for (size_t k = 0; k < parts_.size(); ++k)
        load_plain_archive(archives_[k], parts_[k]->file("shard.pt"), parts_[k]->label("shard.pt"));
    }
  }
  // Flat f's tensors of each shard rank: "param", "step" and the state tensors by name.
  std::vector<std::map<std::string, torch::Tensor>> flat(size_t f) {
    std::vector<std::map<std::string, torch::Tensor>> out;
    for (size_t k = 0; k < parts_.size(); ++k) {
      if (version_ >= 2) {
        const std::string name = unit_file(f);
        if (!parts_[k]->has(name)) throw IoError(parts_[k]->label(name) + ": missing");
        out.push_back(tensors_from_pickle(parts_[k]->file(name), parts_[k]->label(name)));
        continue;
      }
      std::map<std::string, torch::Tensor> m;
      const std::string prefix = "f" + std::to_string(f) + ".";
      std::vector<std::string> keys = {"param", "step"};
      for (const char* s : kStateNames) keys.push_back(s);
      for (const std::string& key : keys)
        if (torch::Tensor t; archives_[k].try_read(prefix + key, t)) m[key] = t;
      out.push_back(std::move(m));
    }
    return out;
  }

 private:
  std::vector<const PartView*> parts_;
  int version_;
  std::vector<torch::serialize::InputArchive> archives_;
};

// Flat f of one tensor rank's shards: its members as full tensors (this tensor rank's slices).
NamedState read_flat(ShardSet& shards, const json& entry, size_t f, const std::string& label,
                     std::map<std::string, tensor::Split>* splits) {
  std::vector<std::map<std::string, torch::Tensor>> pieces = shards.flat(f);
  auto concat = [&](const std::string& what) -> torch::Tensor {
    std::vector<torch::Tensor> ts;
    for (auto& m : pieces) {
      const auto it = m.find(what);
      if (it == m.end()) return {};
      ts.push_back(it->second.reshape({-1}));
    }
    return torch::cat(ts);
  };
  NamedState state;
  if (const auto it = pieces[0].find("step"); it != pieces[0].end() && it->second.numel() == 1)
    state.adam_step = it->second.to(torch::kLong).item<int64_t>();
  const torch::Tensor param = concat("param");
  if (!param.defined())
    throw IoError(label + ": flat " + std::to_string(f) + " has no param");
  std::map<std::string, torch::Tensor> states;
  for (const auto& [key, t] : pieces[0])
    if (key != "param" && key != "step")
      if (torch::Tensor joined = concat(key); joined.defined()) states[key] = joined;
  pieces.clear();
  for (const json& m : entry["members"]) {
    const std::string name = m.at("name").get<std::string>();
    const std::vector<int64_t> shape = m.at("shape").get<std::vector<int64_t>>();
    const int64_t offset = m.at("offset").get<int64_t>(), numel = m.at("numel").get<int64_t>();
    if (offset + numel > param.numel())
      throw IoError(label + ": parameter " + name + " lies outside its shards");
    if (m.contains("split") && m["split"].is_array() && m["split"].size() == 2)
      (*splits)[name] = {m["split"][0].get<int>(), m["split"][1].get<int>()};
    state.params[name] = param.narrow(0, offset, numel).view(shape).clone();
    for (const auto& [s, t] : states)
      state.optimizer[name][s] = t.narrow(0, offset, numel).view(shape).clone();
    if (m.contains("aliases"))
      for (const json& a : m["aliases"]) state.aliases[a.get<std::string>()] = name;
  }
  return state;
}

// A part's layout.json, checked to be a heft-sharded layout.
json part_layout(const std::string& text, const std::string& label) {
  const json l = json::parse(text, nullptr, false);
  if (l.is_discarded() || !l.is_object() || l.value("format", "") != "heft-sharded" ||
      !l.contains("flats") || !l["flats"].is_array())
    throw IoError(label + ": not a heft-sharded layout");
  if (l.value("version", 1) > 2)
    throw IoError(label + ": version " + std::to_string(l.value("version", 1)) +
                  " of the sharded format; this heft reads versions 1 and 2");
  return l;
}

}  // namespace

// Per pipeline stage: its tensor ranks' replicate-0 parts by shard rank, each tensor rank's
// shards opened once.
struct ShardedReader::Stage {
  std::map<int, std::map<int, const PartView*>> by_tensor;
  std::map<int, json> layouts;
  std::map<int, int> shard_sizes;
  int tensor_size = 1;
  std::map<int, std::unique_ptr<ShardSet>> open;
};

ShardedReader::ShardedReader(std::vector<PartView> parts, std::string where)
    : parts_(std::move(parts)), where_(std::move(where)) {
  const PartView* keeper = nullptr;  // replicate 0's part with the buffers, else its first
  for (const PartView& p : parts_) {
    const json& l = p.layout;
    if (l.value("replicate_rank", -1) != 0) continue;
    if (!keeper || (p.has("replicated.pt") && !keeper->has("replicated.pt"))) keeper = &p;
    auto& st = stages_[l.value("pipeline_rank", 0)];
    if (!st) st = std::make_shared<Stage>();
    const int t = l.value("tensor_rank", 0);
    st->tensor_size = l.value("tensor_size", 1);
    st->by_tensor[t][l.value("shard_rank", -1)] = &p;
    st->shard_sizes[t] = l.value("shard_size", 0);
    if (!st->layouts.count(t)) st->layouts[t] = l;
  }
  if (stages_.empty()) throw IoError(where_ + ": no parts of replicate 0");
  for (auto& [s, st] : stages_) {
    if (static_cast<int>(st->by_tensor.size()) != st->tensor_size)
      throw IoError(where_ + ": expected the parts of " + std::to_string(st->tensor_size) +
                    " tensor ranks, found " + std::to_string(st->by_tensor.size()));
    for (auto& [t, by_shard] : st->by_tensor) {
      const int shard_size = st->shard_sizes.at(t);
      if (shard_size <= 0 || static_cast<int>(by_shard.size()) != shard_size ||
          by_shard.begin()->first != 0 || by_shard.rbegin()->first != shard_size - 1)
        throw IoError(by_shard.begin()->second->label("layout.json") + ": expected the shards 0.." +
                      std::to_string(shard_size - 1) + " of replicate 0, found " +
                      std::to_string(by_shard.size()));
    }
    const size_t n = st->layouts.begin()->second["flats"].size();
    for (size_t f = 0; f < n; ++f) flats_.push_back({s, f});
    for (const auto& [t, l] : st->layouts)
      for (const json& flat : l["flats"])
        for (const json& m : flat["members"]) {
          names_.push_back(m.at("name").get<std::string>());
          if (m.contains("aliases"))
            for (const json& a : m["aliases"]) names_.push_back(a.get<std::string>());
        }
  }
  std::sort(names_.begin(), names_.end());
  names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
  optimizer_name_ = stages_.begin()->second->layouts.begin()->second.value("optimizer", "");
  if (keeper) {
    if (keeper->layout.contains("extra")) extra_json_ = keeper->layout["extra"].dump();
    if (keeper->has("replicated.pt"))
      buffers_ = tensors_from_pickle(keeper->file("replicated.pt"), keeper->label("replicated.pt"));
  }
}

ShardedReader::ShardedReader(ShardedReader&&) noexcept = default;
ShardedReader::~ShardedReader() = default;

NamedState ShardedReader::read(size_t i) {
  const auto [s, f] = flats_.at(i);
  Stage& st = *stages_.at(s);
  std::map<std::string, tensor::Split> splits;
  std::vector<NamedState> ranks;
  for (auto& [t, by_shard] : st.by_tensor) {
    auto& open = st.open[t];
    if (!open) {
      std::vector<const PartView*> ordered;
      for (auto& [k, p] : by_shard) ordered.push_back(p);
      open = std::make_unique<ShardSet>(ordered, st.layouts.at(t).value("version", 1));
    }
    const json& flats = st.layouts.at(t)["flats"];
    if (f >= flats.size())
      throw IoError(by_shard.begin()->second->label("layout.json") + ": tensor rank " +
                    std::to_string(t) + " has " + std::to_string(flats.size()) + " flats");
    ranks.push_back(read_flat(*open, flats[f], f, by_shard.begin()->second->label(unit_file(f)), &splits));
  }
  NamedState out;
  out.optimizer_name = optimizer_name_;
  out.adam_step = ranks[0].adam_step;
  if (ranks.size() == 1) {
    out.params = std::move(ranks[0].params);
    out.optimizer = std::move(ranks[0].optimizer);
    out.aliases = std::move(ranks[0].aliases);
    return out;
  }
  out.aliases = ranks[0].aliases;
  for (const auto& [name, t0] : ranks[0].params) {
    const tensor::Split split = splits.count(name) ? splits[name] : tensor::Split{};
    std::vector<torch::Tensor> slices;
    for (const NamedState& r : ranks) {
      if (!r.params.count(name))
        throw IoError(where_ + ": a tensor rank has no parameter " + name);
      slices.push_back(r.params.at(name));
    }
    out.params[name] = tensor::join_slices(slices, split);
    if (!ranks[0].optimizer.count(name)) continue;
    for (const auto& [k, unused] : ranks[0].optimizer.at(name)) {
      std::vector<torch::Tensor> pieces;
      for (const NamedState& r : ranks) pieces.push_back(r.optimizer.at(name).at(k));
      out.optimizer[name][k] = tensor::join_slices(pieces, split);
    }
  }
  return out;
}

NamedState ShardedReader::read_all() {
  NamedState all;
  all.optimizer_name = optimizer_name_;
  for (size_t i = 0; i < size(); ++i) {
    NamedState piece = read(i);
    all.adam_step = std::max(all.adam_step, piece.adam_step);
    for (auto& [name, t] : piece.params) all.params[name] = t;
    for (auto& [name, m] : piece.optimizer) all.optimizer[name] = m;
    for (auto& [a, name] : piece.aliases) all.aliases[a] = name;
  }
  if (all.params.empty()) throw IoError(where_ + ": no parameters");
  all.buffers = buffers_;
  all.extra_json = extra_json_;
  return all;
}

ShardedReader ShardedReader::from_bytes(const std::vector<std::map<std::string, std::string>>& parts,
                                        const std::string& where) {
  const std::string prefix = "checkpoint " + where + ": ";
  std::vector<PartView> views;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    const std::string part = part_name(static_cast<int>(i));
    if (!is_sharded_part(p))
      throw IoError(prefix + "part " + std::to_string(i) +
                    " has no layout.json and shard files (not a sharded checkpoint)");
    PartView v;
    v.layout = part_layout(p.at("layout.json"), prefix + part + "/layout.json");
    v.label = [prefix, part](const std::string& name) { return prefix + part + "/" + name; };
    v.has = [&p](const std::string& name) { return p.count(name) > 0; };
    v.file = [&p, label = v.label](const std::string& name) -> std::string {
      const auto it = p.find(name);
      if (it == p.end()) throw IoError(label(name) + ": missing");
      return it->second;
    };
    if (v.layout.value("version", 1) == 1 && v.layout.value("replicate_rank", -1) == 0)
      check_plain_archive(v.file("shard.pt"), v.label("shard.pt"));
    views.push_back(std::move(v));
  }
  return ShardedReader(std::move(views), "checkpoint " + where);
}

ShardedReader ShardedReader::from_files(std::vector<std::map<std::string, std::string>> paths,
                                        const std::string& who) {
  auto held = std::make_shared<std::vector<std::map<std::string, std::string>>>(std::move(paths));
  auto read_file = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    if (!in) throw IoError(path + ": cannot be read");
    return os.str();
  };
  std::vector<PartView> views;
  for (size_t i = 0; i < held->size(); ++i) {
    const std::map<std::string, std::string>* p = &(*held)[i];
    const auto layout = p->find("layout.json");
    if (layout == p->end())
      throw IoError(who + ": part " + std::to_string(i) + " has no layout.json");
    PartView v;
    v.label = [who, p, held](const std::string& name) {
      const auto it = p->find(name);
      return who + ": " + (it == p->end() ? name : it->second);
    };
    v.layout = part_layout(read_file(layout->second), v.label("layout.json"));
    v.has = [p](const std::string& name) { return p->count(name) > 0; };
    v.file = [p, read_file, label = v.label](const std::string& name) -> std::string {
      const auto it = p->find(name);
      if (it == p->end()) throw IoError(label(name) + ": missing");
      return read_file(it->second);
    };
    views.push_back(std::move(v));
  }
  return ShardedReader(std::move(views), who);
}

NamedState read_sharded(const std::vector<std::map<std::string, std::string>>& parts,
                        const std::string& where) {
  return ShardedReader::from_bytes(parts, where).read_all();
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
