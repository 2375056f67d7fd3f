// The hyperparameters of heft-train: their names, defaults and meaning (the table in
// docs/training.md is this list), and how they are read from `--name value` arguments and
// from SM_HPS, the JSON object a training job gives its workers.
//
// Values may be JSON strings or numbers/booleans in SM_HPS ({"lr": "0.05"} and {"lr": 0.05}
// mean the same); arguments take `--name value` or `--name=value`, and a boolean may stand
// alone (`--scale_lr`). Arguments override SM_HPS. Booleans accept true/false, 1/0, on/off,
// yes/no. Parsing is a value, not an exception (user input): the result's error names the
// hyperparameter and what was expected and found; an unknown name is listed with every
// known one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heft::train {

struct Hyperparameters {
  std::string model = "cnn";             // mlp | cnn
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
};

// One line per hyperparameter: name, default, meaning (for --help).
std::string hyperparameters_help();
// The names, in the order of the struct.
std::vector<std::string> hyperparameter_names();

struct ParsedHyperparameters {
  Hyperparameters value;
  std::string error;  // empty on success
  bool ok() const { return error.empty(); }
};

// args: the command line after the program name. sm_hps: SM_HPS's JSON text (may be empty).
[[nodiscard]] ParsedHyperparameters parse_hyperparameters(const std::vector<std::string>& args,
                                                          const std::string& sm_hps);

}  // namespace heft::train
