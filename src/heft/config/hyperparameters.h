// The hyperparameters of heft-train: their names, defaults and meaning (the table in
// docs/training.md is this list), and how they are read from `--name value` arguments and
// from SM_HPS, the JSON object a training job gives its workers. Torch-free, in config/, so
// that `heft train` and `heft tune` check a heft-train job's hyperparameters against this
// same table before anything is recorded or started (job/spec/spec.cc), and heft-train reads
// them with it (train/main.cc).
//
// Values may be JSON strings or numbers/booleans in SM_HPS ({"lr": "0.05"} and {"lr": 0.05}
// mean the same); arguments take `--name value` or `--name=value`, and a boolean may stand
// alone (`--scale_lr`). Arguments override SM_HPS. Booleans accept true/false, 1/0, on/off,
// yes/no. Parsing is a value, not an exception (user input): the result's error names the
// hyperparameter and what was expected and found; an unknown name gets the nearest known
// one (config/nearest.h), or the list of every name when none is near.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/result.h"

namespace heft::config {

struct Hyperparameters {
  std::string model = "cnn";             // mlp | cnn | gpt
  int64_t epochs = 1;                    // passes over the (limited) training set
  int64_t max_steps = 0;                 // stop after this many steps in all; 0: no limit
  int64_t batch_size = 64;               // global batch: samples per step over all ranks
  double lr = 0.01;                      // peak learning rate (before scale_lr)
  double momentum = 0.9;                 // SGD momentum (sgd only)
  std::string optimizer = "sgd";         // sgd | adamw
  double weight_decay = 0.0;             // L2 (sgd) or decoupled (adamw) weight decay
  int64_t warmup_steps = 0;              // linear warm-up from lr/warmup_steps to lr
  std::string lr_schedule = "constant";  // after warm-up: constant | cosine (to 0 at the end)
  bool scale_lr = false;                 // lr x world size (the linear scaling rule)
  int64_t seed = 0;                      // model initialisation and epoch permutations
  int64_t limit = 0;                     // training samples per epoch; 0: all
  int64_t log_every = 50;                // steps between `step=` lines
  bool eval = true;                      // evaluate on the test set after each epoch
  std::string data;               // data directory; empty: SM_CHANNEL_TRAIN, else the default
  std::string model_dir;          // where rank 0 saves model.pt; empty: SM_MODEL_DIR, else none
  double bucket_mb = 25.0;        // DDP gradient bucket size, MiB
  bool bf16_compression = false;  // DDP: reduce gradients as bfloat16 (lossy)
  std::string checkpoint_dir;     // checkpoints; empty: SM_CHECKPOINT_DIR, else none
  int64_t checkpoint_every = 0;   // steps between checkpoints; 0: HEFT_CHECKPOINT's, else
                                  // only on SIGTERM and at the end
  int64_t checkpoint_keep = 0;    // newest checkpoints kept; 0: HEFT_CHECKPOINT's, else 2
  double beta1 = 0.9;             // AdamW's first-moment decay
  double beta2 = 0.999;           // AdamW's second-moment decay (gpt: 0.95)
  double grad_clip = 0.0;         // clip the global gradient norm to this; 0: off (gpt: 1.0)
  int64_t gradient_accumulation = 1;  // micro-steps per step, communicating on the last only
  std::string device = "cpu";     // cpu | cuda (cuda:LOCAL_RANK) | cuda:N (docs/gpu.md)
  // gpt: its sizes, and evaluation and sampling.
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;       // context length (bytes)
  int64_t eval_every = 0;         // steps between val_loss= lines; 0: after each epoch only
  int64_t generate = 0;           // bytes to sample after training (gpt)
  // The distribution's model-parallel parameters, also accepted as hyperparameters: they
  // override the spec's distribution block, and config::Distribution::with_overrides
  // (distribution.h) holds their rules and defaults; 0, empty or false here: not given.
  int64_t sharded_data_parallel_degree = 0;  // 0: the distribution's (1: no sharding)
  int64_t tensor_parallel_degree = 0;  // 0: the distribution's (1: no tensor parallelism)
  int64_t partitions = 0;         // pipeline stages; 0: the distribution's (1: no pipeline)
  int64_t microbatches = 0;       // per step and data-parallel rank; 0: the distribution's
  std::string pipeline;           // simple | interleaved; empty: the distribution's
  int64_t virtual_stages = 0;     // interleaved: model chunks per pipeline stage; 0: spec's
  std::string partition_boundaries;  // "3,5": the first layer of each stage after the first;
                                     // empty: automatic (or even, auto_partition false)
  int64_t vocab = 256;            // gpt: rows of the embedding and head (bytes use 256)
  int64_t zero_stage = 3;         // sharded: 3 frees a unit's parameters after forward, 2 keeps
                                  // them until its backward
  bool activation_checkpointing = false;  // recompute each unit's forward in backward
  bool bf16 = false;              // sharded: compute in bfloat16, float32 master weights
  bool auto_layout = false;       // the layout search chooses the degrees (docs/auto-layout.md)
  double memory_limit_gb = 0;     // auto_layout: per rank, GB; 0: the distribution's, else
                                  // the machine's available memory / ranks on the host
  int64_t auto_layout_trials = -1;  // auto_layout: layouts tried a few steps each; -1: the
                                    // distribution's (6); 0 or 1: none
};

// The models' own defaults, applied to every hyperparameter not given explicitly (`given`
// holds the names that were): gpt trains on /usr/share/games/fortunes with adamw, lr 1e-3,
// betas (0.9, 0.95), weight_decay 0.1 (matrices only), grad_clip 1.0, 20 warm-up steps,
// cosine, batch_size 16, eval_every 100.
void apply_model_defaults(Hyperparameters& hp, const std::vector<std::string>& given);

// One line per hyperparameter: name, default, meaning (for --help).
std::string hyperparameters_help();
// The names, in the order of the struct.
std::vector<std::string> hyperparameter_names();

struct ParsedHyperparameters {
  Hyperparameters value;
  std::vector<std::string> given;  // names set by SM_HPS or arguments
  std::string error;  // empty on success
  // On error, the hyperparameter the error is about (empty when it is about no single one,
  // such as SM_HPS that is not JSON), and the problem without the name in front
  // ("unknown; did you mean 'lr'?", "expected a number above 0, found 0").
  std::string error_name;
  std::string error_text;
  bool ok() const { return error.empty(); }
};

// Whether `name` is one of heft-train's hyperparameters.
bool is_hyperparameter(const std::string& name);
// The problem with `value` (as a command line carries it) for the known hyperparameter
// `name` ("expected one of sgd, adamw, found 'adam'") as the failure; success when valid.
Status check_hyperparameter(const std::string& name, const std::string& value);
// "unknown; did you mean 'lr'?" (or the list of every name when none is near).
std::string unknown_hyperparameter_text(const std::string& name);
// A JSON value (SM_HPS's) as the text a command line would carry it.
std::string hyperparameter_text(const nlohmann::json& value);

// args: the command line after the program name. sm_hps: SM_HPS's JSON text (may be empty).
[[nodiscard]] ParsedHyperparameters parse_hyperparameters(const std::vector<std::string>& args,
                                                          const std::string& sm_hps);

}  // namespace heft::config
