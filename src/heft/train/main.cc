// heft-train: the built-in trainer. Reads its hyperparameters (hyperparameters.h) from the
// command line and SM_HPS, joins the job (heft::comm::init(); alone when HEFT_STORE is not
// set), and runs train() (trainer.h). Checkpoints go to --checkpoint_dir, else
// SM_CHECKPOINT_DIR; every_steps and keep come from HEFT_CHECKPOINT (the job spec's
// checkpoint block, JSON) unless given as hyperparameters. SIGTERM (a spot interruption,
// heft stop) makes the run checkpoint at the next step boundary and exit 0, as an
// interrupted worker should (docs/jobs.md). auto_layout (docs/auto-layout.md): the layout
// search chooses the degrees before training (auto_layout.h), its first few layouts run a few
// steps each, the nearest run off and the fastest trains (layout_trials.h), and world rank 0
// prints, after the run, "layout: <the choice> [calibrated_step_s=C] measured_step_s=M
// peak_rss_gb=R trial=I trials=K"; --print-plan prints the
// search's table for WORLD_SIZE ranks on this one process, without training. Exit codes: 0 done or stopped; 2 bad input
// (hyperparameters, HEFT_CHECKPOINT, a distribution heft-train cannot run or that does not
// fit the world, malformed data, a checkpoint of another model: every heft::InvalidArgument);
// 1 any other failure (missing data, a lost peer), with the reason on stderr.
#include <sys/resource.h>
#include <sys/stat.h>

#include <malloc.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <optional>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/config/distribution.h"
#include "heft/comm/init.h"
#include "heft/comm/store/memory_store.h"
#include "heft/contract/worker.h"
#include "heft/error.h"
#include "heft/train/auto_layout.h"
#include "heft/train/fashion_mnist.h"
#include "heft/train/hyperparameters.h"
#include "heft/train/layout_trials.h"
#include "heft/parallel/mesh.h"
#include "heft/parallel/pipeline/schedule.h"
#include "heft/train/models.h"
#include "heft/train/strategy.h"
#include "heft/train/text.h"
#include "heft/train/trainer.h"

namespace {

// The world of one this process is, without a job's store.
heft::comm::World alone() {
  heft::comm::CommunicatorOptions o = heft::comm::CommunicatorOptions::from_env();
  if (o.token.empty()) o.token = "local";
  heft::comm::World w;
  w.store = std::make_shared<heft::comm::MemoryStore>();
  w.comm = heft::comm::Communicator::create(w.store, "local", 0, 1, o);
  return w;
}

// The world of a job started by heft run / heft train, or a world of one.
heft::comm::World join() {
  if (heft::contract::HeftVariables::from_process().store) return heft::comm::init();
  return alone();
}

// glibc returns big freed blocks to the kernel (munmap, heap trimming), so every step's
// activations come back as fresh zero-filled pages: a page fault per 4 KiB, ~15% of a CNN
// step on this machine. Keep up to 32 MiB blocks and 512 MiB of free heap instead.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// A message of several lines (a Result's, one problem a line) on one line, "; "-separated.
std::string one_line(const std::string& message) {
  std::string out;
  for (char c : message) out += c == '\n' ? std::string("; ") : std::string(1, c);
  return out;
}

// The distribution this run uses (config/distribution.h). Under `heft train`, `heft plan` or
// `heft run --distribution`, HEFT_DISTRIBUTION carries it resolved (the spec's block with the
// hyperparameters over it, checked there): the worker takes it as it is and merges nothing;
// a flag naming one of its knobs with another value is refused, naming both. heft-train
// started alone (no HEFT_DISTRIBUTION): its flags are the distribution.
heft::Result<heft::config::Distribution> read_distribution(const heft::train::Hyperparameters& hp) {
  using Distribution = heft::config::Distribution;
  const std::optional<std::string> v = heft::contract::HeftVariables::from_process().distribution;
  if (!v) return Distribution{}.with_overrides(hp);
  const nlohmann::json d = nlohmann::json::parse(*v, nullptr, /*allow_exceptions=*/false);
  if (d.is_discarded() || !d.is_object())
    return heft::Result<Distribution>::failure("HEFT_DISTRIBUTION is not a JSON object: " + *v);
  heft::Result<Distribution> given = Distribution::parse(d);
  if (!given.ok()) return heft::Result<Distribution>::failure("HEFT_DISTRIBUTION: " + given.error());
  // Resolving with no hyperparameters only fills what a resolved block leaves implicit
  // (active_microbatches 0: partitions + 2); with this run's flags it must come out the same.
  heft::Result<Distribution> own = given.value().with_overrides(heft::train::Hyperparameters{});
  heft::Result<Distribution> flagged = given.value().with_overrides(hp);
  if (!own.ok() || !flagged.ok()) return own.ok() ? flagged : own;
  const nlohmann::json a = own.value().to_json(), b = flagged.value().to_json();
  if (a == b) return own;
  std::string differ;
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& pa = a.contains("modelparallel") ? a["modelparallel"]["parameters"] : none;
  const nlohmann::json& pb = b.contains("modelparallel") ? b["modelparallel"]["parameters"] : none;
  for (const auto& [key, value] : pb.items())
    if (!pa.contains(key) || pa[key] != value)
      differ += (differ.empty() ? "" : ", ") + std::string("hyperparameters.") + key + " " +
                value.dump() + " (HEFT_DISTRIBUTION: " +
                (pa.contains(key) ? pa[key].dump() : std::string("not set")) + ")";
  if (differ.empty()) differ = "modelparallel " + b.dump() + " (HEFT_DISTRIBUTION: " + a.dump() + ")";
  return heft::Result<Distribution>::failure(
      "flags beside HEFT_DISTRIBUTION, the job's resolved distribution, would change it: " +
      differ + "; set these knobs in the job's spec (its distribution or hyperparameters), "
      "which heft train resolves for every worker");
}

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

// SIGTERM sets g_stop; SA_RESTART keeps the collectives' blocking calls going.
void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
}

// Fills the checkpoint settings from SM_CHECKPOINT_DIR and HEFT_CHECKPOINT
// ({"every_steps": N, "keep": K}) where the hyperparameters leave them unset.
heft::Status apply_checkpoint_env(heft::train::Hyperparameters& hp) {
  if (hp.checkpoint_dir.empty()) hp.checkpoint_dir = heft::comm::env_or("SM_CHECKPOINT_DIR", "");
  const std::optional<std::string> v = heft::contract::HeftVariables::from_process().checkpoint;
  if (!v) return heft::Status::success();
  nlohmann::json c = nlohmann::json::parse(*v, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const char* field) {
    return c.contains(field) && !(c[field].is_number_integer() && c[field].get<int64_t>() >= 0);
  };
  if (c.is_discarded() || !c.is_object() || bad("every_steps") || bad("keep"))
    return heft::Status::failure(
        "HEFT_CHECKPOINT: expected {\"every_steps\": integer >= 0, \"keep\": integer >= 1}, "
        "found " + *v);
  if (hp.checkpoint_every == 0) hp.checkpoint_every = c.value("every_steps", int64_t{0});
  if (hp.checkpoint_keep == 0) hp.checkpoint_keep = c.value("keep", int64_t{0});
  return heft::Status::success();
}

// The data and model directories from the environment where the hyperparameters leave them
// unset, then the checkpoint settings.
heft::Status apply_environment(heft::train::Hyperparameters& hp) {
  const bool text = heft::train::find_model(hp.model).task == "text";
  if (hp.data.empty())
    hp.data = heft::comm::env_or("SM_CHANNEL_TRAIN", text ? heft::train::kDefaultFortunesDir
                                                          : heft::train::kDefaultFashionMnistDir);
  if (hp.model_dir.empty()) hp.model_dir = heft::comm::env_or("SM_MODEL_DIR", "");
  return apply_checkpoint_env(hp);
}

heft::Status set_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return heft::Status::success();
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1)
    return heft::Status::failure(
        std::string("OMP_NUM_THREADS: expected a positive integer, found '") + v + "'");
  torch::set_num_threads(static_cast<int>(n));
  return heft::Status::success();
}

// The command line: --help, --print-mesh and --print-schedule taken out of the
// hyperparameters' arguments.
struct CommandLine {
  bool help = false;
  bool print_mesh = false;
  bool print_schedule = false;
  bool print_plan = false;
  std::vector<std::string> hyperparameters;
};

CommandLine read_command_line(int argc, char** argv) {
  CommandLine c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") c.help = true;
    else if (a == "--print-mesh") c.print_mesh = true;
    else if (a == "--print-schedule") c.print_schedule = true;
    else if (a == "--print-plan") c.print_plan = true;
    else c.hyperparameters.push_back(a);
  }
  return c;
}

void print_help() {
  std::cout << "usage: heft-train [--print-mesh | --print-schedule | --print-plan] [--name value]...  (also "
               "from SM_HPS, a JSON object)\n"
            << "--print-mesh: print the ranks' layout for WORLD_SIZE workers and exit\n"
            << "--print-schedule: print the pipeline's schedule (partitions, microbatches,\n"
            << "  pipeline) as stages x time slots with its bubble, and exit\n"
            << "--print-plan: profile the model here and print the layout search's candidates\n"
            << "  for WORLD_SIZE ranks (predicted step time, memory per rank, why each other\n"
            << "  layout was dropped), and exit; 2 when no layout fits the memory limit\n"
            << "hyperparameters (name, default, meaning):\n"
            << heft::train::hyperparameters_help();
}

int fail(const std::string& message, int code) {
  std::cerr << "heft-train: " << message << "\n";
  return code;
}

// --print-schedule: the pipeline's action lists, simulated.
int print_schedule(const heft::config::Distribution& distribution) {
  const heft::config::ModelParallel& p = distribution.modelparallel;
  try {
    const auto schedule = heft::parallel::pipeline::make_schedule(
        p.pipeline, p.partitions, p.microbatches, p.active_microbatches, p.virtual_stages);
    const auto simulation = heft::parallel::pipeline::simulate(schedule);
    std::cout << heft::parallel::pipeline::render(schedule, simulation);
    return simulation.ok ? 0 : 1;
  } catch (const std::exception& e) {
    return fail(e.what(), 2);
  }
}

// --print-mesh: the layout this job would run on, WORLD_SIZE ranks.
int print_mesh(const heft::config::Distribution& distribution) {
  using heft::parallel::Dim;
  try {
    const int world = std::stoi(heft::comm::env_or("WORLD_SIZE", "1"));
    const heft::parallel::MeshLayout layout(world, heft::train::mesh_shape(distribution, world));
    std::cout << layout.describe();
    for (int r = 0; r < world; ++r)
      std::cout << "rank " << r << ": data " << layout.coordinate(r, Dim::kData) << " pipeline "
                << layout.coordinate(r, Dim::kPipeline) << " tensor "
                << layout.coordinate(r, Dim::kTensor) << " shard "
                << layout.coordinate(r, Dim::kShard) << " replicate "
                << layout.coordinate(r, Dim::kReplicate) << "\n";
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what(), 2);
  }
}

// --print-plan: the layout search for WORLD_SIZE ranks, profiled here, without training; in a
// job (HEFT_STORE: `heft plan --measure`) on its ranks, which measure the collectives, rank 0
// printing.
int print_plan(const heft::train::Hyperparameters& hp, const heft::config::Distribution& distribution) {
  try {
    const int world = std::stoi(heft::comm::env_or("WORLD_SIZE", "1"));
    if (world < 1) return fail("WORLD_SIZE: expected at least 1, found " + std::to_string(world), 2);
    heft::comm::World one = join();
    const heft::train::LayoutInputs in = heft::train::layout_inputs(hp, distribution, *one.comm, world);
    if (one.comm->rank() != 0) return 0;
    std::cout << heft::train::describe_inputs(in);
    const heft::parallel::layout::SearchResult r =
        heft::parallel::layout::search(in.model, in.comm, in.options);
    std::cout << heft::parallel::layout::describe(r, 10)
              << "layout: " << heft::train::layout_fields(r.ranked.front(), static_cast<double>(in.options.memory_limit_bytes))
              << std::endl;
    return 0;
  } catch (const heft::InvalidArgument& e) {
    return fail(e.what(), 2);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}

// train(), and under in-place recovery (HEFT_RECOVERY=in_place, docs/recovery.md) again in
// each re-formed world after a lost peer, for as long as this rank holds a state the others
// can take and the launcher restarts the lost rank. `may_recover` false (an automatic
// layout: a restarted rank would search again alone) keeps the first failure final.
heft::train::TrainResult train_recovering(const heft::train::Hyperparameters& hp,
                                          const heft::config::Distribution& distribution,
                                          const std::string& test_dir, heft::comm::World& world,
                                          bool may_recover) {
  const heft::contract::HeftVariables job = heft::contract::HeftVariables::from_process();
  heft::train::Recovery recovery;
  recovery.enabled = may_recover && job.in_place_recovery() && world.comm->size() > 1;
  recovery.generation = job.generation.value_or(0);
  if (job.in_place_recovery() && !may_recover && world.comm->rank() == 0)
    std::cerr << "heft-train: in-place recovery is off under auto_layout: a lost rank restarts the group\n";
  for (;;) {
    try {
      return heft::train::train(hp, distribution, test_dir, *world.comm, std::cout, &g_stop, &recovery);
    } catch (const heft::PeerLost& e) {
      if (!recovery.enabled || !recovery.holds()) throw;
      std::cerr << "heft-train: rank " << world.comm->rank() << ": " << e.what()
                << "; holding step " << recovery.newest() << ", waiting for the restarted rank\n";
      const heft::comm::CommunicatorOptions options = heft::comm::CommunicatorOptions::from_env();
      const int next = heft::comm::wait_for_generation(*world.store, recovery.generation, options.timeout, &g_stop);
      if (next < 0) throw;  // stopped while waiting: the launcher gave up on recovering in place
      recovery.generation = next;
      heft::comm::rejoin(world, next, options);
    }
  }
}

// Joins the job and trains; the exit code.
int run(const heft::train::Hyperparameters& hp, const heft::config::Distribution& distribution,
        const std::string& test_dir) {
  install_stop_handler();
  try {
    keep_freed_memory();
    heft::comm::World world = join();
    heft::train::Hyperparameters run_hp = hp;
    heft::config::Distribution run_distribution = distribution;
    std::optional<heft::train::LayoutChoice> choice;
    if (distribution.modelparallel.auto_layout) {
      choice = heft::train::choose_layout(hp, distribution, *world.comm, std::cout);
      heft::train::run_layout_trials(hp, test_dir, *world.comm, std::cout, *choice);
      run_distribution = choice->distribution;
      run_hp.gradient_accumulation = choice->gradient_accumulation;
    }
    if (const heft::Status fits = run_distribution.check_world(world.comm->size()); !fits.ok())
      return fail(fits.error(), 2);
    const heft::train::TrainResult r = train_recovering(run_hp, run_distribution, test_dir, world, !choice);
    if (choice && world.comm->rank() == 0) {
      struct rusage u {};
      getrusage(RUSAGE_SELF, &u);
      // calibrated_step_s: the prediction x the trials' measured / predicted (none without trials).
      char calibrated[48] = "";
      if (choice->calibration > 0)
        std::snprintf(calibrated, sizeof calibrated, " calibrated_step_s=%.4f",
                      choice->prediction.step_s * choice->calibration);
      std::printf("layout: %s%s measured_step_s=%.4f peak_rss_gb=%.3f trial=%d trials=%d\n",
                  heft::train::layout_fields(choice->prediction,
                                             static_cast<double>(choice->inputs.options.memory_limit_bytes))
                      .c_str(),
                  calibrated, r.median_step_s, static_cast<double>(u.ru_maxrss) * 1024 / 1e9, choice->trial,
                  choice->trials);
      std::fflush(stdout);
    }
    if (r.stopped)
      std::cerr << "heft-train: stopped by SIGTERM at step " << r.steps
                << (hp.checkpoint_dir.empty() ? std::string(" (no checkpoint directory)")
                                              : "; checkpointed in " + hp.checkpoint_dir)
                << "\n";
  } catch (const heft::InvalidArgument& e) {
    return fail(e.what(), 2);  // bad input: a hyperparameter, a degree, a checkpoint of another model
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::umask(077);  // checkpoints and the model are heft's files: private, as heft's own
  const CommandLine command = read_command_line(argc, argv);
  if (command.help) {
    print_help();
    return 0;
  }
  const char* sm_hps = std::getenv("SM_HPS");
  const heft::train::ParsedHyperparameters parsed =
      heft::train::parse_hyperparameters(command.hyperparameters, sm_hps ? sm_hps : "");
  if (!parsed.ok()) return fail(parsed.error, 2);
  heft::train::Hyperparameters hp = parsed.value;
  const heft::Result<heft::config::Distribution> distribution = read_distribution(hp);
  if (!distribution.ok()) return fail(one_line(distribution.error()), 2);
  if (command.print_schedule) return print_schedule(distribution.value());
  if (command.print_mesh) return print_mesh(distribution.value());
  // A bad OMP_NUM_THREADS is bad input: exit 2, as every other.
  if (const heft::Status s = set_threads(); !s.ok()) return fail(s.error(), 2);
  if (command.print_plan) return print_plan(hp, distribution.value());
  if (const heft::Status s = apply_environment(hp); !s.ok()) return fail(s.error(), 2);
  const std::string test_dir = heft::comm::env_or("SM_CHANNEL_TEST", hp.data);
  return run(hp, distribution.value(), test_dir);
}
