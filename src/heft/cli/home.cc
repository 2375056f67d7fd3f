// `heft home`: the folder heft keeps its jobs, database and data in ($HEFT_HOME, else
// ~/.heft; job/paths.h), as an absolute path on one line. The estimator SDK asks it, so the
// variable is read in one place.
#include <filesystem>
#include <iostream>

#include "heft/cli/commands.h"
#include "heft/job/paths.h"

namespace heft::cli {

Command add_home_command(CLI::App& app) {
  app.add_subcommand("home", "Print heft's home folder ($HEFT_HOME, else ~/.heft)");
  return []() -> int {
    std::cout << std::filesystem::absolute(job::heft_home()).lexically_normal().string()
              << std::endl;
    return 0;
  };
}

}  // namespace heft::cli
