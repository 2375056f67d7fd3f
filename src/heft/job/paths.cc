// heft's home and job directories (paths.h).
#include "heft/job/paths.h"

#include <cstdio>

#include <cstdlib>
#include <filesystem>

#include "heft/contract/worker.h"

namespace heft::job {

namespace fs = std::filesystem;

std::string heft_home() { return contract::heft_home(); }

std::string database_path(const std::string& home) { return home + "/heft.db"; }

std::string JobPaths::rank_log(int rank) const {
  return logs + "/rank-" + std::to_string(rank) + ".log";
}

std::string JobPaths::input_dir(const std::string& host) const { return input + "/" + host; }

std::string JobPaths::input_config_dir(const std::string& host) const {
  return input_dir(host) + "/config";
}

JobPaths job_paths(const std::string& home, const std::string& name) {
  JobPaths p;
  p.root = home + "/jobs/" + name;
  p.logs = p.root + "/logs";
  p.checkpoints = p.root + "/checkpoints";
  p.model = p.root + "/model";
  p.output = p.root + "/output";
  p.output_data = p.output + "/data";
  p.output_intermediate = p.output + "/intermediate";
  p.input = p.root + "/input";
  return p;
}

Status make_home(const std::string& home) {
  std::error_code ec;
  if (fs::is_directory(home, ec)) return Status::success();
  fs::create_directories(home, ec);
  if (ec) return Status::failure("cannot create heft's home " + home + ": " + ec.message());
  fs::permissions(home, fs::perms::owner_all, ec);
  return Status::success();
}

std::string home_exposure_warning(const std::string& home) {
  std::error_code ec;
  const fs::perms p = fs::status(home, ec).permissions();
  if (ec || (p & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none) return "";
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(p) & 07777u);
  return "heft's home " + home + " can be read by other users (mode " + mode +
         "): job logs, metrics and checkpoints are inside; chmod 700 " + home;
}

Status make_job_dirs(const JobPaths& paths) {
  std::error_code ec;
  if (fs::exists(paths.root, ec) && !fs::is_empty(paths.root, ec))
    return Status::failure("the job directory " + paths.root +
                           " already exists and is not empty; remove it or choose another "
                           "name with --name");
  for (const std::string& dir :
       {paths.logs, paths.checkpoints, paths.model, paths.output_data, paths.output_intermediate,
        paths.input}) {
    fs::create_directories(dir, ec);
    if (ec) return Status::failure("cannot create " + dir + ": " + ec.message());
  }
  return Status::success();
}

}  // namespace heft::job
