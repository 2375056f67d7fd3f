// heft-train's hyperparameters, as the trainer's code names them. The table itself lives in
// config/hyperparameters.h (torch-free), where `heft train` and `heft tune` check a spec's
// hyperparameters against it before a job starts.
#pragma once

#include "heft/config/hyperparameters.h"

namespace heft::train {

using config::apply_model_defaults;
using config::hyperparameter_names;
using config::hyperparameters_help;
using config::Hyperparameters;
using config::parse_hyperparameters;
using config::ParsedHyperparameters;

}  // namespace heft::train
