// The heft command's subcommands: each file in cli/ adds one to the CLI11 app and returns
// the callback that runs it. Every command returns its process exit code; errors go to
// stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "heft/config/distribution.h"
#include "heft/job/launch/worker_env.h"

namespace heft::cli {

using Command = std::function<int()>;

// The umask heft was started with. `heft` itself runs with umask 077, so that everything it
// creates (database, job folders, logs) is private; workers get this one back.
int user_umask();

// `heft run [--hosts H] [-n P] [--timeout S] -- CMD ARGS...` (run.cc)
Command add_run_command(CLI::App& app);
// `heft bench <collective> ...` (bench.cc)
Command add_bench_command(CLI::App& app);
// `heft train SPEC [--name N] [--set key.path=value ...]` (train.cc)
Command add_train_command(CLI::App& app);
// `heft resume JOB` (resume.cc)
Command add_resume_command(CLI::App& app);
// The directory of the running heft binary, where heft-train is built too (train.cc).
std::string heft_binary_dir();
// The directory holding heft's Python package (`heft/__init__.py`), which workers get first
// on their PYTHONPATH: `<bin>/python` in a build tree, `<bin>/../HEFT_PYTHON_INSTALL_DIR`
// in an installed copy; "" when there is none (built without Python) (train.cc).
std::string heft_python_dir();
// What workers get first on their PYTHONPATH for a job of distribution `d`: heft_python_dir(),
// and heft's stand-ins for the vendor's libraries `d` enables: smdistributed.dataparallel
// (python/heft/vendor/smddp) and smdistributed.modelparallel, or heft's modelparallel block
// (python/heft/vendor/smdmp), each a part of the namespace package `smdistributed`
// (docs/porting.md); "" without a Python package (train.cc).
std::string worker_python_path(const config::Distribution& d);
// `heft plan SPEC [--set key.path=value ...]` (plan.cc)
Command add_plan_command(CLI::App& app);
// `heft jobs [--status S] [--tuning NAME] [--since WHEN] [--limit N] [--json]` (jobs.cc)
Command add_jobs_command(CLI::App& app);
// `heft delete JOB... | --tuning NAME` (delete.cc)
Command add_delete_command(CLI::App& app);
// `heft describe JOB [--json]` (describe.cc)
Command add_describe_command(CLI::App& app);
// `heft logs JOB [--rank R] [--follow]` (logs.cc)
Command add_logs_command(CLI::App& app);
// `heft metrics JOB [--name M] [--format table|csv|json]` (metrics.cc)
Command add_metrics_command(CLI::App& app);
// `heft home` (home.cc)
Command add_home_command(CLI::App& app);
// `heft tunings [--json]` (tunings.cc)
Command add_tunings_command(CLI::App& app);
// The record of the tuning job named `name` when there is one and no training job of that
// name: what describe and stop act on instead of a job (describe.cc).
std::optional<nlohmann::json> find_tuning_not_job(const std::string& name);
// `heft tune SPEC [--name N] [--set key.path=value ...]` (tune.cc)
Command add_tune_command(CLI::App& app);
// `heft stop JOB [--wait]` (stop.cc)
Command add_stop_command(CLI::App& app);
// `heft diagnose JOB [--json]` (diagnose.cc)
Command add_diagnose_command(CLI::App& app);
// `heft contract [--json]`: the worker contract's table (contract.cc)
Command add_contract_command(CLI::App& app);
// `heft report JOB [-o FILE]` (report.cc)
Command add_report_command(CLI::App& app);
// `heft console [--port P] [--host H] [--token-file F] [--allow-host N]... [--no-auth]
// [--tls-cert C --tls-key K]` (console.cc)
Command add_console_command(CLI::App& app);
// `heft mpi-worker -- CMD` and `heft slurm-worker -- CMD` (hidden; engine_worker.cc)
Command add_mpi_worker_command(CLI::App& app);
Command add_slurm_worker_command(CLI::App& app);
// `heft slurm-batch --dir D ... -- SRUN...` (hidden; slurm_batch.cc)
Command add_slurm_batch_command(CLI::App& app);

}  // namespace heft::cli
