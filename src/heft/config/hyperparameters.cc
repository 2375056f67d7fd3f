#include "heft/config/hyperparameters.h"

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "heft/config/distribution.h"
#include "heft/config/nearest.h"

namespace heft::config {

namespace {

enum class Kind { kInt, kDouble, kBool, kString };

struct Field {
  const char* name;
  Kind kind;
  const char* help;
  // Stores a parsed value; returns an error text (empty on success).
  std::function<std::string(Hyperparameters&, const std::string&)> set;
  std::function<std::string(const Hyperparameters&)> show;
};

const char* kind_text(Kind k) {
  switch (k) {
    case Kind::kInt: return "an integer";
    case Kind::kDouble: return "a number";
    case Kind::kBool: return "true or false";
    case Kind::kString: return "a string";
  }
  return "?";
}

std::string parse_int(const std::string& s, int64_t min, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0) return "expected an integer, found '" + s + "'";
  if (v < min) return "expected at least " + std::to_string(min) + ", found " + s;
  *out = v;
  return "";
}

std::string parse_double(const std::string& s, double min, bool strict, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || v != v)
    return "expected a number, found '" + s + "'";
  if (strict ? !(v > min) : !(v >= min)) {
    std::ostringstream os;
    os << "expected a number " << (strict ? "above " : "of at least ") << min << ", found " << s;
    return os.str();
  }
  *out = v;
  return "";
}

std::string parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "1" || s == "on" || s == "yes" || s == "True") {
    *out = true;
    return "";
  }
  if (s == "false" || s == "0" || s == "off" || s == "no" || s == "False") {
    *out = false;
    return "";
  }
  return "expected true or false, found '" + s + "'";
}

std::string one_of(const std::string& s, const std::vector<std::string>& options,
                   std::string* out) {
  for (const std::string& o : options)
    if (s == o) {
      *out = s;
      return "";
    }
  std::string list;
  for (const std::string& o : options) list += (list.empty() ? "" : ", ") + o;
  return "expected one of " + list + ", found '" + s + "'";
}

std::string show_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Field int_field(const char* name, int64_t Hyperparameters::*member, int64_t min, const char* help) {
  return Field{
      name, Kind::kInt, help,
      [=](Hyperparameters& h, const std::string& s) { return parse_int(s, min, &(h.*member)); },
      [=](const Hyperparameters& h) { return std::to_string(h.*member); }};
}

// strict: the value must exceed min, else it may equal it.
Field double_field(const char* name, double Hyperparameters::*member, double min, bool strict,
                   const char* help) {
  return Field{name, Kind::kDouble, help,
               [=](Hyperparameters& h, const std::string& s) {
                 return parse_double(s, min, strict, &(h.*member));
               },
               [=](const Hyperparameters& h) { return show_double(h.*member); }};
}

Field bool_field(const char* name, bool Hyperparameters::*member, const char* help) {
  return Field{
      name, Kind::kBool, help,
      [=](Hyperparameters& h, const std::string& s) { return parse_bool(s, &(h.*member)); },
      [=](const Hyperparameters& h) { return std::string(h.*member ? "true" : "false"); }};
}

// options empty: any string.
Field string_field(const char* name, std::string Hyperparameters::*member,
                   std::vector<std::string> options, const char* help) {
  return Field{name, Kind::kString, help,
               [=](Hyperparameters& h, const std::string& s) {
                 if (!options.empty()) return one_of(s, options, &(h.*member));
                 h.*member = s;
                 return std::string();
               },
               [=](const Hyperparameters& h) {
                 return (h.*member).empty() ? std::string("\"\"") : h.*member;
               }};
}

// "" (the distribution block's) or one of the distribution's schedules.
std::vector<std::string> pipeline_options() {
  std::vector<std::string> options{""};
  options.insert(options.end(), kPipelineKinds.begin(), kPipelineKinds.end());
  return options;
}

const std::vector<Field>& fields() {
  using H = Hyperparameters;
  static const std::vector<Field> f{
      string_field("model", &H::model, {"mlp", "cnn", "gpt"},
                   "mlp | cnn (Fashion-MNIST) | gpt (text)"),
      int_field("epochs", &H::epochs, 1, "passes over the (limited) training set"),
      int_field("max_steps", &H::max_steps, 0, "stop after this many steps in all; 0: no limit"),
      int_field("batch_size", &H::batch_size, 1, "global batch: samples per step over all ranks"),
      double_field("lr", &H::lr, 0.0, true, "peak learning rate (before scale_lr)"),
      double_field("momentum", &H::momentum, 0.0, false, "SGD momentum (sgd only)"),
      string_field("optimizer", &H::optimizer, {"sgd", "adamw"}, "sgd | adamw"),
      double_field("weight_decay", &H::weight_decay, 0.0, false,
                   "weight decay: L2 for sgd, decoupled for adamw"),
      int_field("warmup_steps", &H::warmup_steps, 0,
                "linear warm-up of the learning rate over these steps"),
      string_field("lr_schedule", &H::lr_schedule, {"constant", "cosine"},
                   "after warm-up: constant, or cosine (half cosine down to 0 at the last step)"),
      bool_field("scale_lr", &H::scale_lr,
                 "multiply lr by the number of ranks (linear scaling rule)"),
      int_field("seed", &H::seed, 0,
                "seed of the model's initialisation and of the epoch shuffles"),
      int_field("limit", &H::limit, 0, "training samples per epoch; 0: all"),
      int_field("log_every", &H::log_every, 1, "steps between step= lines"),
      bool_field("eval", &H::eval, "evaluate on the test set after each epoch"),
      string_field("data", &H::data, {},
                   "data directory; default SM_CHANNEL_TRAIN, else "
                   "/usr/share/datasets/fashion-mnist"),
      string_field("model_dir", &H::model_dir, {},
                   "where rank 0 saves model.pt; default SM_MODEL_DIR, else not saved"),
      double_field("bucket_mb", &H::bucket_mb, 0.0, true, "DDP gradient bucket size in MiB"),
      bool_field("bf16_compression", &H::bf16_compression,
                 "DDP: reduce gradients as bfloat16 (lossy)"),
      string_field("checkpoint_dir", &H::checkpoint_dir, {},
                   "where checkpoints are saved and resumed from; default SM_CHECKPOINT_DIR, "
                   "else none"),
      int_field("checkpoint_every", &H::checkpoint_every, 0,
                "steps between checkpoints; 0: HEFT_CHECKPOINT's every_steps, else only on "
                "SIGTERM and at the end"),
      int_field("checkpoint_keep", &H::checkpoint_keep, 0,
                "newest checkpoints kept; 0: HEFT_CHECKPOINT's keep, else 2"),
      double_field("beta1", &H::beta1, 0.0, false, "AdamW's first-moment decay"),
      double_field("beta2", &H::beta2, 0.0, false, "AdamW's second-moment decay (gpt: 0.95)"),
      double_field("grad_clip", &H::grad_clip, 0.0, false,
                   "clip the global gradient norm to this; 0: off (gpt: 1.0)"),
      int_field("gradient_accumulation", &H::gradient_accumulation, 1,
                "micro-steps per step; gradients are communicated on the last only"),
      Field{"device", Kind::kString,
            "cpu | cuda (the GPU of the rank's LOCAL_RANK) | cuda:N (docs/gpu.md)",
            [](Hyperparameters& h, const std::string& s) {
              const bool cuda_n = s.size() > 5 && s.compare(0, 5, "cuda:") == 0 &&
                                  s.find_first_not_of("0123456789", 5) == std::string::npos &&
                                  s.size() <= 9;
              if (s != "cpu" && s != "cuda" && !cuda_n)
                return "'" + s + "': expected cpu, cuda or cuda:N";
              h.device = s;
              return std::string();
            },
            [](const Hyperparameters& h) { return h.device; }},
      int_field("n_layer", &H::n_layer, 1, "gpt: transformer blocks"),
      int_field("n_head", &H::n_head, 1, "gpt: attention heads (must divide n_embd)"),
      int_field("n_embd", &H::n_embd, 1, "gpt: model width"),
      int_field("block_size", &H::block_size, 1, "gpt: context length in bytes"),
      int_field("eval_every", &H::eval_every, 0,
                "steps between val_loss= lines; 0: after each epoch only"),
      int_field("generate", &H::generate, 0, "gpt: bytes to sample after training"),
      int_field("sharded_data_parallel_degree", &H::sharded_data_parallel_degree, 0,
                "shard parameters, gradients and optimizer state over groups of this many "
                "data-parallel ranks; 0: the distribution block's; 1: no sharding"),
      int_field("tensor_parallel_degree", &H::tensor_parallel_degree, 0,
                "split each layer over groups of this many ranks (gpt); 0: the distribution "
                "block's; 1: none"),
      int_field("partitions", &H::partitions, 0,
                "pipeline stages (gpt); 0: the distribution block's; 1: no pipeline"),
      int_field("microbatches", &H::microbatches, 0,
                "pipeline micro-batches per step (must divide each data-parallel rank's "
                "share); 0: the distribution block's"),
      string_field("pipeline", &H::pipeline, pipeline_options(),
                   "simple (GPipe) | interleaved (1F1B); empty: the distribution block's"),
      int_field("virtual_stages", &H::virtual_stages, 0,
                "interleaved pipeline: model chunks per stage (Megatron's interleaved 1F1B; "
                "microbatches must be a multiple of partitions); 0: the distribution block's"),
      string_field("partition_boundaries", &H::partition_boundaries, {},
                   "pipeline: the first layer of each stage after the first, comma-separated "
                   "(\"3,5\"); empty: the distribution block's, else the partitioner's split"),
      int_field("vocab", &H::vocab, 256,
                "gpt: embedding and head rows (at least the 256 byte values; more makes a "
                "heavier head)"),
      int_field("zero_stage", &H::zero_stage, 2,
                "sharded: 3 frees a unit's parameters after its forward, 2 keeps them until "
                "its backward"),
      bool_field("activation_checkpointing", &H::activation_checkpointing,
                 "recompute each block's forward in backward instead of keeping activations"),
      bool_field("bf16", &H::bf16,
                 "sharded: forward and backward in bfloat16 with float32 master weights"),
      bool_field("auto_layout", &H::auto_layout,
                 "choose the data, sharded, tensor and pipeline degrees, micro-batches, virtual "
                 "stages and checkpointing by the layout search (gpt; docs/auto-layout.md)"),
      double_field("memory_limit_gb", &H::memory_limit_gb, 0.0, false,
                   "auto_layout: memory per rank in GB (10^9 bytes); 0: the distribution "
                   "block's, else the host's available memory / its ranks"),
      int_field("auto_layout_trials", &H::auto_layout_trials, 0,
                "auto_layout: the search's first layouts (at most this many, predicted within "
                "1.3x of the first) each train a few steps and the fastest measured is kept; 0 "
                "or 1: none; -1: the distribution block's, else 6"),
  };
  return f;
}

const Field* find_field(const std::string& name) {
  for (const Field& f : fields())
    if (name == f.name) return &f;
  return nullptr;
}

std::string known_names() {
  std::string known;
  for (const Field& f : fields()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  return known;
}

// One problem: the hyperparameter it is about and what is wrong.
struct Problem {
  std::string name;
  std::string text;  // empty: none
};

Problem set_field(Hyperparameters& h, const std::string& name, const std::string& value) {
  const Field* f = find_field(name);
  if (!f) return {name, unknown_hyperparameter_text(name)};
  return {name, f->set(h, value)};
}

}  // namespace

bool is_hyperparameter(const std::string& name) { return find_field(name) != nullptr; }

Status check_hyperparameter(const std::string& name, const std::string& value) {
  Hyperparameters scratch;
  std::string problem = set_field(scratch, name, value).text;
  return problem.empty() ? Status::success() : Status::failure(std::move(problem));
}

std::string unknown_hyperparameter_text(const std::string& name) {
  // Names other trainers use for the same settings (a suggestion, never accepted as such).
  static const std::vector<std::pair<std::string, std::string>> kSynonyms = {
      {"learning_rate", "lr"},          {"learning-rate", "lr"},
      {"num_epochs", "epochs"},         {"n_epochs", "epochs"},
      {"batch-size", "batch_size"},     {"train_batch_size", "batch_size"},
      {"per_device_train_batch_size", "batch_size"},
      {"max_grad_norm", "grad_clip"},   {"clip_grad_norm", "grad_clip"},
      {"gradient_accumulation_steps", "gradient_accumulation"},
      {"warmup", "warmup_steps"},       {"num_warmup_steps", "warmup_steps"},
      {"lr_scheduler", "lr_schedule"},  {"lr_scheduler_type", "lr_schedule"},
      {"optim", "optimizer"},           {"steps", "max_steps"},
      {"num_layers", "n_layer"},        {"n_layers", "n_layer"},
      {"num_heads", "n_head"},          {"n_heads", "n_head"},
      {"hidden_size", "n_embd"},        {"d_model", "n_embd"},
      {"context_length", "block_size"}, {"seq_len", "block_size"},
      {"mixed_precision", "bf16"},      {"bfloat16", "bf16"},
      {"pipeline_parallel_degree", "partitions"},
      {"gradient_checkpointing", "activation_checkpointing"}};
  std::string suggestion;
  for (const auto& [synonym, ours] : kSynonyms)
    if (name == synonym) suggestion = ours;
  if (suggestion.empty()) suggestion = nearest(name, hyperparameter_names());
  if (!suggestion.empty()) return "unknown; did you mean '" + suggestion + "'?";
  return "unknown; known: " + known_names();
}

std::string hyperparameter_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    std::ostringstream os;
    os.precision(17);
    os << v.get<double>();
    return os.str();
  }
  return v.dump();
}

std::vector<std::string> hyperparameter_names() {
  std::vector<std::string> names;
  for (const Field& f : fields()) names.emplace_back(f.name);
  return names;
}

std::string hyperparameters_help() {
  std::ostringstream os;
  const Hyperparameters defaults;
  for (const Field& f : fields()) {
    std::string head = std::string("  --") + f.name + " " + f.show(defaults);
    if (head.size() < 28) head.resize(28, ' ');
    os << head << " " << f.help << " (" << kind_text(f.kind) << ")\n";
  }
  return os.str();
}

ParsedHyperparameters parse_hyperparameters(const std::vector<std::string>& args,
                                            const std::string& sm_hps) {
  ParsedHyperparameters r;
  auto fail = [&](std::string e) {
    r.error = std::move(e);
    return r;
  };
  // "hyperparameter lr (in SM_HPS): expected ..." / "unknown hyperparameter 'lr2'; did you..."
  auto fail_on = [&](const Problem& p, const char* where) {
    r.error_name = p.name;
    r.error_text = p.text;
    if (!is_hyperparameter(p.name))
      return fail("unknown hyperparameter '" + p.name + "'" + where +
                  p.text.substr(std::string("unknown").size()));
    return fail("hyperparameter " + p.name + where + ": " + p.text);
  };
  if (!sm_hps.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(sm_hps);
    } catch (const std::exception& e) {
      return fail(std::string("SM_HPS is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) return fail("SM_HPS must be a JSON object, found " + j.dump());
    for (const auto& [name, value] : j.items()) {
      const Problem p = set_field(r.value, name, hyperparameter_text(value));
      if (!p.text.empty()) return fail_on(p, " (in SM_HPS)");
      r.given.push_back(name);
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      return fail("unexpected argument '" + a + "': expected --name value");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const Field* f = find_field(eq == std::string::npos ? name : name.substr(0, eq));
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (f && f->kind == Kind::kBool &&
               (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0)) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else if (f) {
      return fail("hyperparameter " + name + ": missing value (expected " + kind_text(f->kind) +
                  ")");
    }
    const Problem p = set_field(r.value, name, value);
    if (!p.text.empty()) return fail_on(p, "");
    r.given.push_back(name);
  }
  if (r.value.zero_stage > 3)
    return fail_on({"zero_stage", "expected 2 or 3, found " + std::to_string(r.value.zero_stage)}, "");
  if (r.value.n_embd % r.value.n_head != 0)
    return fail_on({"n_head", "expected a divisor of n_embd (" + std::to_string(r.value.n_embd) +
                                  "), found " + std::to_string(r.value.n_head)}, "");
  apply_model_defaults(r.value, r.given);
  return r;
}

void apply_model_defaults(Hyperparameters& hp, const std::vector<std::string>& given) {
  if (hp.model != "gpt") return;
  const auto unset = [&](const char* name) {
    for (const std::string& g : given)
      if (g == name) return false;
    return true;
  };
  if (unset("optimizer")) hp.optimizer = "adamw";
  if (unset("lr")) hp.lr = 1e-3;
  if (unset("beta2")) hp.beta2 = 0.95;
  if (unset("weight_decay")) hp.weight_decay = 0.1;
  if (unset("grad_clip")) hp.grad_clip = 1.0;
  if (unset("warmup_steps")) hp.warmup_steps = 20;
  if (unset("lr_schedule")) hp.lr_schedule = "cosine";
  if (unset("batch_size")) hp.batch_size = 16;
  if (unset("eval_every")) hp.eval_every = 100;
}

}  // namespace heft::config
