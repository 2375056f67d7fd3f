// heft-train: the built-in trainer. Reads its hyperparameters (hyperparameters.h) from the
// command line and SM_HPS, joins the job (heft::comm::init(); alone when HEFT_STORE is not
// set), and runs train() (trainer.h). Checkpoints go to --checkpoint_dir, else
// SM_CHECKPOINT_DIR; every_steps and keep come from HEFT_CHECKPOINT (the job spec's
// checkpoint block, JSON) unless given as hyperparameters. SIGTERM (a spot interruption,
// heft stop) makes the run checkpoint at the next step boundary and exit 0, as an
// interrupted worker should (docs/jobs.md). Exit codes: 0 done or stopped; 2 bad input
// (hyperparameters, HEFT_CHECKPOINT, a distribution heft-train cannot run or that does not
// fit the world, malformed data, a checkpoint of another model: every heft::InvalidArgument);
// 1 any other failure (missing data, a lost peer), with the reason on stderr.
#include <sys/stat.h>

#include <malloc.h>
#include <signal.h>

#include <atomic>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/config/distribution.h"
#include "heft/comm/init.h"
#include "heft/comm/store/memory_store.h"
#include "heft/error.h"
#include "heft/train/fashion_mnist.h"
#include "heft/train/hyperparameters.h"
#include "heft/parallel/mesh.h"
#include "heft/parallel/pipeline/schedule.h"
#include "heft/train/models.h"
#include "heft/train/strategy.h"
#include "heft/train/text.h"
#include "heft/train/trainer.h"

namespace {

// The world of a job started by heft run / heft train, or a world of one.
heft::comm::World join() {
  if (std::getenv("HEFT_STORE")) return heft::comm::init();
  heft::comm::CommunicatorOptions o = heft::comm::CommunicatorOptions::from_env();
  if (o.token.empty()) o.token = "local";
  heft::comm::World w;
  w.store = std::make_shared<heft::comm::MemoryStore>();
  w.comm = heft::comm::Communicator::create(w.store, "local", 0, 1, o);
  return w;
}

// glibc returns big freed blocks to the kernel (munmap, heap trimming), so every step's
// activations come back as fresh zero-filled pages: a page fault per 4 KiB, ~15% of a CNN
// step on this machine. Keep up to 32 MiB blocks and 512 MiB of free heap instead.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// HEFT_DISTRIBUTION (the job spec's distribution block), read as the same type `heft train`
// validated (config/distribution.h). A spec that enables what heft-train cannot run yet is
// refused rather than silently ignored. Returns the problems, "; "-separated.
std::string read_distribution(heft::config::Distribution* out) {
  const char* v = std::getenv("HEFT_DISTRIBUTION");
  if (!v || !*v) return "";
  nlohmann::json d = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
  if (d.is_discarded() || !d.is_object())
    return "HEFT_DISTRIBUTION is not a JSON object: " + std::string(v);
  std::vector<std::string> errors;
  *out = heft::config::Distribution::parse(d, &errors);
  const std::vector<std::string> unsupported = out->unsupported_by_trainer();
  errors.insert(errors.end(), unsupported.begin(), unsupported.end());
  std::string text;
  for (const std::string& e : errors) text += (text.empty() ? "" : "; ") + e;
  return text;
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
std::string apply_checkpoint_env(heft::train::Hyperparameters& hp) {
  if (hp.checkpoint_dir.empty()) hp.checkpoint_dir = heft::comm::env_or("SM_CHECKPOINT_DIR", "");
  const char* v = std::getenv("HEFT_CHECKPOINT");
  if (!v || !*v) return "";
  nlohmann::json c = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const char* field) {
    return c.contains(field) && !(c[field].is_number_integer() && c[field].get<int64_t>() >= 0);
  };
  if (c.is_discarded() || !c.is_object() || bad("every_steps") || bad("keep"))
    return "HEFT_CHECKPOINT: expected {\"every_steps\": integer >= 0, \"keep\": integer >= 1}, "
           "found " + std::string(v);
  if (hp.checkpoint_every == 0) hp.checkpoint_every = c.value("every_steps", int64_t{0});
  if (hp.checkpoint_keep == 0) hp.checkpoint_keep = c.value("keep", int64_t{0});
  return "";
}

void set_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 1)
    throw heft::InvalidArgument(
        std::string("OMP_NUM_THREADS: expected a positive integer, found '") + v + "'");
  torch::set_num_threads(static_cast<int>(n));
}

}  // namespace

int main(int argc, char** argv) {
  ::umask(077);  // checkpoints and the model are heft's files: private, as heft's own
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::cout << "usage: heft-train [--print-mesh | --print-schedule] [--name value]...  (also from SM_HPS, a "
                   "JSON object)\n"
                << "--print-mesh: print the ranks' layout for WORLD_SIZE workers and exit\n"
                << "--print-schedule: print the pipeline's schedule (partitions, microbatches,\n"
                << "  pipeline) as stages x time slots with its bubble, and exit\n"
                << "hyperparameters (name, default, meaning):\n"
                << heft::train::hyperparameters_help();
      return 0;
    }
  bool print_mesh = false, print_schedule = false;
  for (auto it = args.begin(); it != args.end();)
    if (*it == "--print-mesh" || *it == "--print-schedule") {
      (*it == "--print-mesh" ? print_mesh : print_schedule) = true;
      it = args.erase(it);
    } else {
      ++it;
    }
  const char* sm_hps = std::getenv("SM_HPS");
  heft::train::ParsedHyperparameters parsed =
      heft::train::parse_hyperparameters(args, sm_hps ? sm_hps : "");
  if (!parsed.ok()) {
    std::cerr << "heft-train: " << parsed.error << "\n";
    return 2;
  }
  heft::config::Distribution distribution;
  if (std::string e = read_distribution(&distribution); !e.empty()) {
    std::cerr << "heft-train: " << e << "\n";
    return 2;
  }
  heft::train::Hyperparameters hp = parsed.value;
  if (print_schedule) {  // the pipeline's action lists, simulated, then exit
    try {
      const heft::train::PipelineSettings p = heft::train::pipeline_settings(distribution, hp);
      const auto schedule =
          heft::parallel::pipeline::make_schedule(p.kind, p.partitions, p.microbatches, p.active,
                                                  p.virtual_stages);
      const auto simulation = heft::parallel::pipeline::simulate(schedule);
      std::cout << heft::parallel::pipeline::render(schedule, simulation);
      return simulation.ok ? 0 : 1;
    } catch (const std::exception& e) {
      std::cerr << "heft-train: " << e.what() << "\n";
      return 2;
    }
  }
  if (print_mesh) {  // the layout this job would run on, then exit: WORLD_SIZE ranks
    try {
      const int world = std::stoi(heft::comm::env_or("WORLD_SIZE", "1"));
      const heft::parallel::MeshLayout layout(world, heft::train::mesh_shape(distribution, hp, world));
      std::cout << layout.describe();
      for (int r = 0; r < world; ++r)
        std::cout << "rank " << r << ": data " << layout.coordinate(r, heft::parallel::Dim::kData)
                  << " pipeline " << layout.coordinate(r, heft::parallel::Dim::kPipeline)
                  << " tensor " << layout.coordinate(r, heft::parallel::Dim::kTensor) << " shard "
                  << layout.coordinate(r, heft::parallel::Dim::kShard) << " replicate "
                  << layout.coordinate(r, heft::parallel::Dim::kReplicate) << "\n";
      return 0;
    } catch (const std::exception& e) {
      std::cerr << "heft-train: " << e.what() << "\n";
      return 2;
    }
  }
  if (distribution.modelparallel.enabled && distribution.modelparallel.activation_checkpointing)
    hp.activation_checkpointing = true;
  if (distribution.modelparallel.enabled && distribution.modelparallel.bf16) hp.bf16 = true;
  const bool text = heft::train::find_model(hp.model).task == "text";
  if (hp.data.empty())
    hp.data = heft::comm::env_or("SM_CHANNEL_TRAIN", text ? heft::train::kDefaultFortunesDir
                                                          : heft::train::kDefaultFashionMnistDir);
  if (hp.model_dir.empty()) hp.model_dir = heft::comm::env_or("SM_MODEL_DIR", "");
  if (std::string e = apply_checkpoint_env(hp); !e.empty()) {
    std::cerr << "heft-train: " << e << "\n";
    return 2;
  }
  const std::string test_dir = heft::comm::env_or("SM_CHANNEL_TEST", hp.data);
  try {
    set_threads();  // a bad OMP_NUM_THREADS is bad input: exit 2, as every other
  } catch (const heft::InvalidArgument& e) {
    std::cerr << "heft-train: " << e.what() << "\n";
    return 2;
  }
  install_stop_handler();
  try {
    keep_freed_memory();
    heft::comm::World world = join();
    if (const auto problems = distribution.check_world(world.comm->size()); !problems.empty()) {
      for (const std::string& e : problems) std::cerr << "heft-train: " << e << "\n";
      return 2;
    }
    const heft::train::TrainResult r =
        heft::train::train(hp, distribution, test_dir, *world.comm, std::cout, &g_stop);
    if (r.stopped)
      std::cerr << "heft-train: stopped by SIGTERM at step " << r.steps
                << (hp.checkpoint_dir.empty() ? std::string(" (no checkpoint directory)")
                                              : "; checkpointed in " + hp.checkpoint_dir)
                << "\n";
  } catch (const heft::InvalidArgument& e) {
    std::cerr << "heft-train: " << e.what() << "\n";
    return 2;  // bad input: a hyperparameter, a degree, a checkpoint of another model
  } catch (const std::exception& e) {
    std::cerr << "heft-train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
