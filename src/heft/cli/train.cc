// `heft train SPEC [--name N] [--set key.path=value ...] [--print-spec]`: validates the spec,
// records the job in the database (named by the spec's name, or its base_name and the time),
// makes its directory with the training toolkit's input config files and supervises it to
// the end (job::Supervisor). --print-spec prints the normalized spec instead and starts
// nothing.
// Exit codes: 0 Completed, 1 Failed, 2 bad spec or usage, 3 Stopped (docs/jobs.md).
#include <unistd.h>

#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "heft/cli/commands.h"
#include "heft/cli/supervise.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"
#include "heft/job/supervisor.h"

namespace heft::cli {

namespace {

constexpr const char* kName = "heft train";
// Names tried for a base_name within one millisecond (each a counter more) before giving up.
constexpr int kMaxNameTries = 100;

struct TrainArgs {
  std::string spec_path;
  std::string name;
  std::vector<std::string> overrides;
  bool print_spec = false;
};

// Every line of a (possibly multi-line) message, each led by the command's name.
void report(const std::string& message) {
  std::istringstream lines(message);
  std::string line;
  while (std::getline(lines, line)) std::cerr << kName << ": " << line << "\n";
}

struct Recorded {
  job::JobRecord record;
  job::JobPaths paths;
};

// Records the job under its name, or under its base_name and the time (spec.name becomes
// that), and makes its directory. An error for a name taken or a directory refused.
heft::Result<Recorded> record_job(job::JobDb& db, const std::string& home, job::JobSpec& spec) {
  const bool generated = spec.name.empty();
  const double now = job::unix_now();
  std::string error;
  for (int counter = 1; counter <= kMaxNameTries; ++counter) {
    if (generated) spec.name = job::timestamped_name(spec.base_name, now, counter);
    if (db.has_job(spec.name)) {
      if (generated) continue;
      const job::JobRecord existing = db.find_job(spec.name).value();
      return heft::Result<Recorded>::failure(
          "a job named '" + spec.name + "' already exists (" + existing.status + ", created " +
          job::local_time_text(existing.created_at) +
          "); job names are unique: choose another with --name, delete it (heft delete " +
          spec.name + "), or give the spec a base_name instead of a name");
    }
    const job::JobPaths paths = job::job_paths(home, spec.name);
    if (const heft::Status made = job::make_job_dirs(paths); !made.ok()) {
      error = made.error();
      if (generated) continue;
      break;
    }
    heft::Result<job::JobRecord> record =
        db.create_job(spec.name, job::spec_to_json(spec), paths.root, spec.cluster.instance_count,
                      spec.world_size(), generated ? spec.base_name : "");
    if (record.ok()) return heft::Result<Recorded>::success({std::move(record).value(), paths});
    error = record.error();  // another heft train took the name a moment ago
    if (!generated) break;
  }
  return heft::Result<Recorded>::failure(error);
}

int train(const TrainArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.name.empty()) overrides.push_back("name=" + args.name);
  const heft::Result<job::JobSpec> spec = job::load_spec(args.spec_path, overrides);
  if (!spec.ok()) {
    report(spec.error());
    return job::kExitBadSpec;
  }
  if (args.print_spec) {
    std::cout << job::normalized_spec_json(spec.value()).dump(2) << "\n";
    return 0;
  }
  const heft::Result<std::vector<std::string>> command =
      job::worker_command(spec.value(), heft_binary_dir());
  if (!command.ok()) {
    report(command.error());
    return job::kExitBadSpec;
  }
  const std::string home = job::heft_home();
  if (const heft::Status made = job::make_home(home); !made.ok()) {
    report(made.error());
    return job::kExitFailed;
  }
  if (const std::string warning = job::home_exposure_warning(home); !warning.empty())
    report("warning: " + warning);
  std::unique_ptr<job::JobDb> db = job::open_job_db(home, true);
  db->fail_orphaned_jobs();
  job::JobSpec job_spec = spec.value();
  heft::Result<Recorded> recorded = record_job(*db, home, job_spec);
  if (!recorded.ok()) {
    report(recorded.error());
    return job::kExitBadSpec;
  }
  Recorded& created = recorded.value();
  if (const heft::Status written = job::write_input_config(job_spec, created.paths);
      !written.ok()) {
    report(written.error());
    return job::kExitFailed;
  }
  return supervise(*db, std::move(created.record), job_spec, created.paths, command.value(),
                   kName);
}

}  // namespace

// The directory of the running heft binary, where heft-train is built too.
std::string heft_binary_dir() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  const std::string path(buf.data(), static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string heft_python_dir() {
  const std::string bin = heft_binary_dir();
  std::vector<std::string> candidates = {bin + "/python"};
#ifdef HEFT_PYTHON_INSTALL_DIR
  candidates.push_back(bin + "/../" HEFT_PYTHON_INSTALL_DIR);
#endif
  for (const std::string& dir : candidates)
    if (::access((dir + "/heft/__init__.py").c_str(), R_OK) == 0) return dir;
  return "";
}

std::string worker_python_path(const config::Distribution& d) {
  const std::string dir = heft_python_dir();
  if (dir.empty()) return dir;
  // Each stand-in's folder holds part of the namespace package `smdistributed`.
  std::string path = dir;
  if (d.launch.given("smdistributed.dataparallel")) path += ":" + dir + "/heft/vendor/smddp";
  if (d.launch.given("smdistributed.modelparallel") || d.modelparallel.enabled)
    path += ":" + dir + "/heft/vendor/smdmp";
  return path;
}

Command add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Run a training job from a YAML spec");
  cmd->add_option("spec", args->spec_path, "The job spec (docs/jobs.md)")
      ->required()
      ->type_name("SPEC");
  cmd->add_option("--name", args->name, "The job's name (overrides the spec's name)")
      ->check([](const std::string& v) {
        return v.empty() ? std::string("expected a job name, found ''") : std::string();
      });
  cmd->add_option("--set", args->overrides,
                  "Override a field: key.path=value (repeatable), e.g. "
                  "--set hyperparameters.lr=0.1")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);  // one value per --set, so SPEC is never taken for one
  cmd->add_flag("--print-spec", args->print_spec,
                "Print the spec as heft reads it (JSON: defaults filled in, the cloud SDK's "
                "distribution dicts in heft's form) and exit; nothing is recorded or started");
  cmd->footer(
      "Exit codes: 0 Completed, 1 Failed, 2 bad spec or usage, 3 Stopped.\n"
      "Spec reference, statuses and the workers' environment: docs/jobs.md");
  return [args]() -> int { return train(*args); };
}

}  // namespace heft::cli
