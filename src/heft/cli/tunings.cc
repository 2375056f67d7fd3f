// `heft tunings [--json]`: every tuning job of this $HEFT_HOME, newest first (docs/tuning.md).
#include <iostream>
#include <memory>

#include "heft/cli/commands.h"
#include "heft/job/paths.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

Command add_tunings_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("tunings", "List hyperparameter tuning jobs, newest first");
  cmd->add_flag("--json", *json, "Print a JSON array instead of a table");
  return [json]() -> int {
    const auto tunings = tune::list_tunings(job::heft_home());
    if (*json)
      std::cout << nlohmann::json(tunings).dump(2) << std::endl;
    else
      std::cout << tune::tunings_table(tunings) << std::flush;
    return 0;
  };
}

}  // namespace heft::cli
