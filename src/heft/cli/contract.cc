// `heft contract [--json] [--knobs]`: every variable a worker gets from heft (contract/worker.h's
// table), as the Markdown table docs/worker-contract.md holds, or as JSON; with --knobs, comm's
// tuning knobs instead (comm/knobs.h, docs/comm.md's "Tuning variables"). Exit 0.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "heft/cli/commands.h"
#include "heft/comm/knobs.h"
#include "heft/contract/worker.h"

namespace heft::cli {

Command add_contract_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto knobs = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "contract", "List every variable a worker gets from heft, its type, default and meaning");
  cmd->add_flag("--json", *json, "Print JSON instead of the Markdown table");
  cmd->add_flag("--knobs", *knobs, "The communicator's tuning variables instead");
  return [json, knobs]() -> int {
    if (*knobs) {
      if (!*json) {
        std::cout << comm::knobs_markdown() << std::flush;
        return 0;
      }
      nlohmann::json out = nlohmann::json::array();
      for (const comm::Knob& k : comm::tuning_knobs())
        out.push_back({{"name", k.name}, {"default", k.shown_default}, {"meaning", k.meaning}});
      std::cout << out.dump(2) << std::endl;
      return 0;
    }
    const auto& rows = contract::worker_variables();
    if (!*json) {
      std::cout << contract::markdown(rows) << std::flush;
      return 0;
    }
    nlohmann::json out = nlohmann::json::array();
    for (const contract::Variable& v : rows)
      out.push_back({{"name", v.name},
                     {"set_by", v.set_by},
                     {"type", v.type},
                     {"when_unset", v.when_unset},
                     {"example", v.example},
                     {"meaning", v.meaning},
                     {"spec_may_set", !v.reserved}});
    std::cout << out.dump(2) << std::endl;
    return 0;
  };
}

}  // namespace heft::cli
