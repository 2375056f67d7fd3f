#include "heft/train/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <future>
#include <limits>

#include <nlohmann/json.hpp>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/parallel/checkpoint_collective.h"
#include "heft/parallel/mesh.h"
#include "heft/parallel/pipeline/partition.h"
#include "heft/parallel/sharded/sharded_checkpoint.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/gpt.h"
#include "heft/train/models.h"
#include "heft/train/optimizer.h"
#include "heft/train/strategy.h"
#include "heft/train/task.h"

namespace heft::train {

namespace {

using Clock = std::chrono::steady_clock;

// This thread's CPU seconds (what it computed, not the time it waited for a core).
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

OptimizerConfig optimizer_config(const Hyperparameters& hp, int data_size,
                                 int64_t steps_per_epoch) {
  OptimizerConfig c;
  c.name = hp.optimizer;
  c.lr = hp.lr * (hp.scale_lr ? data_size : 1);
  c.momentum = hp.momentum;
  c.weight_decay = hp.weight_decay;
  c.warmup_steps = hp.warmup_steps;
  c.schedule = hp.lr_schedule;
  c.total_steps = hp.epochs * steps_per_epoch;
  if (hp.max_steps > 0) c.total_steps = std::min(c.total_steps, hp.max_steps);
  c.beta1 = hp.beta1;
  c.beta2 = hp.beta2;
  c.decay_matrices_only = find_model(hp.model).decay_matrices_only;
  return c;
}

double peak_rss_mb() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// The device the hyperparameter `device` names for this process: cpu, or a GPU (cuda: the
// one of LOCAL_RANK; cuda:N). A GPU needs LibTorch to see one, and, until heft's collectives
// take CUDA tensors, a run of one rank (docs/gpu.md).
torch::Device resolve_device(const std::string& device, int world_size) {
  if (device == "cpu") return torch::kCPU;
  const int64_t seen = static_cast<int64_t>(torch::cuda::device_count());
  if (seen == 0)
    throw InvalidArgument("device " + device + ": LibTorch sees no GPU (torch::cuda::device_count() is 0)"
                          "; use device cpu");
  if (world_size > 1)
    throw InvalidArgument("device " + device + " with " + std::to_string(world_size) +
                          " ranks: heft's collectives do not take CUDA tensors yet (docs/gpu.md); "
                          "run one rank on the GPU, or device cpu");
  int64_t index = 0;
  if (device.size() > 5) {
    index = std::stoll(device.substr(5));
  } else if (const char* local = std::getenv("LOCAL_RANK")) {
    index = std::atoll(local);
  }
  if (index < 0 || index >= seen)
    throw InvalidArgument("device " + device + ": GPU " + std::to_string(index) + ", LibTorch sees " +
                          std::to_string(seen));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::shared_ptr<Model> build_model(const Hyperparameters& hp, parallel::DeviceMesh& mesh,
                                   const torch::Device& device) {
  // Seeded first, so every rank builds the same model (DDP broadcasts rank 0's anyway).
  torch::manual_seed(static_cast<uint64_t>(hp.seed));
  ModelContext context;
  context.hp = hp;
  context.mesh = &mesh;
  std::shared_ptr<Model> model = make_model(hp.model, context);
  // Built on the CPU from the seed (the same values on every device), then moved: the
  // optimizer the strategy makes next holds the moved parameters.
  if (!device.is_cpu()) model->to(device);
  return model;
}

// A rank's training state at a step boundary, for in-place recovery: the position and the
// strategy's files. Packed as an 8-byte length, the position and the files' names and sizes
// in CBOR, then the files' bytes back to back (one copy each: a per-step buddy copy of a few
// MB costs a memcpy, not a byte-by-byte encoding). Its files: the strategy's part as
// Strategy::state_copy gives it (kPartCopy; else state()'s files) and the generator's raw
// state (kRngRaw).
constexpr char kPartCopy[] = "part.copy";
constexpr char kRngRaw[] = "rng.raw";

struct State {
  int64_t step = 0, epoch = 1, next_batch = 0, samples = 0;
  double seconds = 0, loss = 0;
  std::map<std::string, std::string> files;
};

void pack(const State& s, std::string* out);

std::string pack(const State& s) {
  std::string out;
  pack(s, &out);
  return out;
}

// Into *out, whose capacity is reused (a copy evicted earlier: its pages are resident).
void pack(const State& s, std::string* out) {
  nlohmann::json j = {{"step", s.step},       {"epoch", s.epoch},     {"next_batch", s.next_batch},
                      {"samples", s.samples}, {"seconds", s.seconds}, {"loss", s.loss}};
  nlohmann::json files = nlohmann::json::array();
  size_t total = 0;
  for (const auto& [name, bytes] : s.files) {
    files.push_back({name, bytes.size()});
    total += bytes.size();
  }
  j["files"] = std::move(files);
  const std::vector<uint8_t> meta = nlohmann::json::to_cbor(j);
  const uint64_t meta_size = meta.size();
  out->resize(sizeof meta_size + meta.size() + total);  // only growth is zero-filled
  char* at = out->data();
  std::memcpy(at, &meta_size, sizeof meta_size);
  std::memcpy(at += sizeof meta_size, meta.data(), meta.size());
  at += meta.size();
  for (const auto& [name, bytes] : s.files) {
    std::memcpy(at, bytes.data(), bytes.size());
    at += bytes.size();
  }
}

State unpack(const std::string& blob) {
  uint64_t meta_size = 0;
  if (blob.size() < sizeof meta_size) throw Error("in-place recovery: a state of " + std::to_string(blob.size()) + " bytes is truncated");
  std::memcpy(&meta_size, blob.data(), sizeof meta_size);
  if (meta_size > blob.size() - sizeof meta_size)
    throw Error("in-place recovery: a state's header says " + std::to_string(meta_size) + " bytes, it holds " +
                std::to_string(blob.size()));
  const char* meta = blob.data() + sizeof meta_size;
  const nlohmann::json j = nlohmann::json::from_cbor(meta, meta + meta_size);
  State s;
  s.step = j.at("step").get<int64_t>();
  s.epoch = j.at("epoch").get<int64_t>();
  s.next_batch = j.at("next_batch").get<int64_t>();
  s.samples = j.at("samples").get<int64_t>();
  s.seconds = j.at("seconds").get<double>();
  s.loss = j.at("loss").is_number() ? j.at("loss").get<double>() : std::numeric_limits<double>::quiet_NaN();
  size_t at = sizeof meta_size + meta_size;
  for (const nlohmann::json& f : j.at("files")) {
    const size_t size = f.at(1).get<size_t>();
    if (size > blob.size() - at)
      throw Error("in-place recovery: a state's file " + f.at(0).get<std::string>() + " of " + std::to_string(size) +
                  " bytes runs past its end");
    s.files[f.at(0).get<std::string>()] = blob.substr(at, size);
    at += size;
  }
  return s;
}

// One run of train(): the mesh, the task, the strategy and what the loop counts. The rank
// the strategy names prints.
class Training {
 public:
  Training(const Hyperparameters& hp, const config::Distribution& distribution,
           const std::string& test_dir, comm::Communicator& world, std::ostream& out,
           const std::atomic<bool>* stop, Recovery* recovery)
      : hp_(hp),
        stop_(stop),
        recovery_(recovery),
        world_(world),
        out_(out),
        mesh_(world, mesh_shape(distribution, world.size())),
        task_(make_task(find_model(hp.model).task, hp, test_dir,
                        mesh_.coordinate(parallel::Dim::kData),
                        mesh_.size(parallel::Dim::kData))),
        optimizer_config_(optimizer_config(hp, mesh_.size(parallel::Dim::kData),
                                           task_->steps_per_epoch())),
        device_(resolve_device(hp.device, world.size())),
        strategy_(make_strategy(distribution, hp, mesh_, build_model(hp, mesh_, device_),
                                optimizer_config_)),
        sharded_degree_(distribution.modelparallel.sharded_data_parallel_degree) {
    for (const std::string& name : task_->metric_names())
      result_.metrics.emplace_back(name, std::numeric_limits<double>::quiet_NaN());
  }

  TrainResult run() {
    print_layout();
    // The buddies' copies travel on a communicator of their own, whose thread moves them
    // while training goes on (the world's runs its operations one at a time, in order).
    if (buddies_) buddy_comm_ = world_.split(0, world_.rank());
    if (recovery_ && recovery_->generation > 0) {
      recover();
    } else {
      if (!hp_.checkpoint_dir.empty()) resume();
      refresh_buddy(/*wait=*/true);  // copies of the first state, before the first step
    }
    state_valid_ = true;
    world_.barrier();  // start the clock together
    train_epochs();
    result_.steps = step_;
    result_.seconds = seconds_;
    result_.samples_per_s = static_cast<double>(samples_) / seconds_;
    step_times();
    if (result_.stopped) return result_;
    checkpoint();
    finish();
    return result_;
  }

 private:
  // With model parallelism: where this rank sits, and (once) the whole layout.
  void print_layout() {
    if (mesh_.size(parallel::Dim::kTensor) > 1 || mesh_.size(parallel::Dim::kPipeline) > 1 ||
        mesh_.size(parallel::Dim::kShard) != mesh_.size(parallel::Dim::kData) ||
        sharded_degree_ > 1) {
      print("mesh: rank=%d data=%d pipeline=%d tensor=%d shard=%d replicate=%d", world_.rank(),
            mesh_.coordinate(parallel::Dim::kData), mesh_.coordinate(parallel::Dim::kPipeline),
            mesh_.coordinate(parallel::Dim::kTensor), mesh_.coordinate(parallel::Dim::kShard),
            mesh_.coordinate(parallel::Dim::kReplicate));
      if (strategy_->reports()) out_ << mesh_.layout().describe() << "strategy: " << strategy_->describe() << std::endl;
    }
  }

  // The epochs from the resumed position until the last, max_steps or a stop.
  void train_epochs() {
    bool done = hp_.max_steps > 0 && step_ >= hp_.max_steps;
    const int64_t steps_per_epoch = task_->steps_per_epoch();
    for (int64_t epoch = epoch_; epoch <= hp_.epochs && !done; ++epoch) {
      task_->set_epoch(epoch - 1);
      const Clock::time_point t0 = Clock::now();
      epoch_t0_ = t0;
      in_epoch_ = true;
      for (int64_t i = next_batch_; i < steps_per_epoch && !done; ++i) {
        // The generator at this step boundary, for an in-place recovery's state (the step
        // may draw from it before a collective fails).
        if (recovery_ && recovery_->enabled) {
          boundary_rng_ = parallel::rng_raw();
          boundary_step_ = step_;
        }
        profiler_.begin_step(step_ + 1);
        const Clock::time_point step_start = Clock::now();
        const Batch batch = [&] {
          auto data = profiler_.phase(profile::Phase::kData);
          Batch b = task_->batch(i);
          if (!device_.is_cpu()) {
            b.inputs = b.inputs.to(device_, /*non_blocking=*/true);
            b.targets = b.targets.to(device_, /*non_blocking=*/true);
          }
          return b;
        }();
        const double lr = learning_rate(optimizer_config_, step_);
        // The buddies' copies of the last boundary, in before this step's first collective:
        // once any rank has finished this step, every rank's part of the last boundary is
        // held by its buddy, so a recovery redoes at most one step.
        collect_buddy();
        in_step_ = true;
        const torch::Tensor loss_sum = strategy_->step(batch, *task_, lr);
        ++step_;
        epoch_ = epoch;  // the position after this step, before any other collective
        next_batch_ = i + 1;
        in_step_ = false;
        refresh_buddy();
        step_seconds_.push_back(seconds_since(step_start));
        samples_ += batch.samples;
        if (!memory_printed_) print_memory();
        done = hp_.max_steps > 0 && step_ >= hp_.max_steps;
        const bool last = done || (epoch == hp_.epochs && i + 1 == steps_per_epoch);
        if (step_ % hp_.log_every == 0 || last)
          log_step(epoch, lr, loss_sum, batch.global_count,
                   seconds_ + seconds_since(t0) - eval_seconds_);
        profiler_.end_step();
        if (hp_.eval && hp_.eval_every > 0 && step_ % hp_.eval_every == 0) {
          const Clock::time_point e0 = Clock::now();
          log_evaluation("step", step_);
          eval_seconds_ += seconds_since(e0);  // not training time
        }
        result_.stopped = stop_agreed();
        if (result_.stopped || (hp_.checkpoint_every > 0 && step_ % hp_.checkpoint_every == 0))
          checkpoint();
        done = done || result_.stopped;
      }
      seconds_ += seconds_since(t0) - eval_seconds_;
      eval_seconds_ = 0;
      in_epoch_ = false;
      if (result_.stopped) break;
      if (hp_.eval && evaluated_step_ != step_) log_evaluation("epoch", epoch);
      if (next_batch_ == steps_per_epoch) {  // not when max_steps cut it short
        epoch_ = epoch + 1;
        next_batch_ = 0;
      }
    }
  }

  // In-place recovery, in the re-formed world (Recovery in trainer.h).
  void recover() {
    if (replicated_) recover_replica();
    else recover_parts();
  }

  // Data parallel: every rank says the newest step it holds (-1: restarted, none), the lowest
  // rank holding the newest sends that state to all, and every rank's freshly built strategy
  // loads it.
  void recover_replica() {
    const int n = world_.size();
    const int64_t mine = recovery_->newest();
    std::vector<int64_t> held(static_cast<size_t>(n));
    world_.allgather(&mine, held.data(), 1, comm::DataType::i64);
    int64_t target = -1;
    int source = -1, restarted = 0;
    for (int r = 0; r < n; ++r) {
      if (held[r] < 0) ++restarted;
      if (held[r] > target) {
        target = held[r];
        source = r;
      }
    }
    if (source < 0) throw Error("in-place recovery: no rank holds a state; the group restarts from its checkpoints");
    std::string blob;
    if (world_.rank() == source) blob = recovery_->own.back().blob;
    int64_t bytes = static_cast<int64_t>(blob.size());
    world_.broadcast(&bytes, 1, comm::DataType::i64, source);
    blob.resize(static_cast<size_t>(bytes));
    world_.broadcast(blob.data(), blob.size(), comm::DataType::u8, source);
    take_states({unpack(blob)}, "in-place recovery (rank " + std::to_string(source) + "'s state at step " +
                                   std::to_string(target) + ")");
    report_recovery(source, restarted, bytes);
  }

  // Every other strategy: the newest step whose every part is held (a restarted rank's by its
  // buddy), the restarted ranks' parts from their buddies, then every part to every rank.
  void recover_parts() {
    const int n = world_.size();
    constexpr int kFields = 5;  // own steps (2), kept steps (2), holds a state (0/1)
    std::array<int64_t, kFields> mine{-1, -1, -1, -1, recovery_->holds() ? 1 : 0};
    for (size_t i = 0; i < recovery_->own.size() && i < 2; ++i) mine[i] = recovery_->own[recovery_->own.size() - 1 - i].step;
    for (size_t i = 0; i < recovery_->kept.size() && i < 2; ++i)
      mine[2 + i] = recovery_->kept[recovery_->kept.size() - 1 - i].step;
    std::vector<int64_t> all(static_cast<size_t>(n * kFields));
    world_.allgather(mine.data(), all.data(), kFields, comm::DataType::i64);
    const auto field = [&](int r, int f) { return all[static_cast<size_t>(r * kFields + f)]; };
    // The steps rank x's part can be had at: its own, or (restarted) its buddy's copies.
    const auto available = [&](int x, int64_t step) {
      if (field(x, 4)) return step == field(x, 0) || step == field(x, 1);
      const int h = holder_of(x);
      return field(h, 4) != 0 && (step == field(h, 2) || step == field(h, 3));
    };
    int64_t target = -1;
    int restarted = 0;
    for (int x = 0; x < n; ++x) restarted += field(x, 4) ? 0 : 1;
    for (int x = 0; x < n; ++x)
      for (int f = 0; f < 4; ++f) {
        const int64_t step = field(x, f);
        if (step <= target) continue;
        bool everyone = true;
        for (int y = 0; y < n && everyone; ++y) everyone = available(y, step);
        if (everyone) target = step;
      }
    if (target < 0) {
      std::string lost;
      for (int x = 0; x < n; ++x)
        if (!field(x, 4)) lost += (lost.empty() ? "" : ", ") + std::to_string(x) + " (buddy rank " + std::to_string(holder_of(x)) + ")";
      throw Error("in-place recovery: no step whose every part is held in memory (restarted ranks: " + lost +
                  "); the group restarts from its checkpoints");
    }
    const auto find = [target](const std::vector<Recovery::Copy>& copies) -> const std::string& {
      for (const Recovery::Copy& c : copies)
        if (c.step == target) return c.blob;
      throw Error("in-place recovery: no copy at step " + std::to_string(target));
    };
    // A restarted rank's part from its buddy: sizes, then bytes.
    const int me = world_.rank();
    std::string part;
    if (recovery_->holds()) part = find(recovery_->own);
    const int source = source_of(me);
    const bool give = !field(source, 4) && recovery_->holds();
    const bool take = !recovery_->holds();
    int64_t give_bytes = 0, take_bytes = 0;
    std::vector<comm::P2POp> ops;
    const std::string* given = give ? &find(recovery_->kept) : nullptr;
    if (give) {
      give_bytes = static_cast<int64_t>(given->size());
      ops.push_back(comm::P2POp::send(&give_bytes, 1, comm::DataType::i64, source));
    }
    if (take) ops.push_back(comm::P2POp::recv(&take_bytes, 1, comm::DataType::i64, holder_of(me)));
    if (!ops.empty()) world_.exchange(ops);
    ops.clear();
    if (take) part.resize(static_cast<size_t>(take_bytes));
    if (give) ops.push_back(comm::P2POp::send(given->data(), given->size(), comm::DataType::u8, source));
    if (take) ops.push_back(comm::P2POp::recv(part.data(), part.size(), comm::DataType::u8, holder_of(me)));
    if (!ops.empty()) world_.exchange(ops);
    // Every part to every rank: the checkpoint's reader takes them all.
    const int64_t my_bytes = static_cast<int64_t>(part.size());
    std::vector<int64_t> sizes(static_cast<size_t>(n));
    world_.allgather(&my_bytes, sizes.data(), 1, comm::DataType::i64);
    const int64_t widest = *std::max_element(sizes.begin(), sizes.end());
    part.resize(static_cast<size_t>(widest));
    std::string every(static_cast<size_t>(widest * n), '\0');
    world_.allgather(part.data(), every.data(), static_cast<size_t>(widest), comm::DataType::u8);
    std::vector<State> states;
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      states.push_back(unpack(every.substr(static_cast<size_t>(r * widest), static_cast<size_t>(sizes[r]))));
      total += sizes[r];
    }
    take_states(std::move(states), "in-place recovery (the parts at step " + std::to_string(target) + ")");
    report_recovery(-1, restarted, total);
    refresh_buddy(/*wait=*/true);  // the re-formed world holds copies at once
  }

  // Every rank's part (one for a replica) into the strategy, as a checkpoint's parts; the
  // generator and the position from the first, as resume() takes them.
  void take_states(std::vector<State> states, const std::string& where) {
    const std::string rng = states.front().files.at(kRngRaw);
    std::vector<std::map<std::string, std::string>> parts;
    for (State& s : states) {
      s.files.erase(kRngRaw);
      if (const auto copy = s.files.find(kPartCopy); copy != s.files.end())
        s.files = parallel::sharded::files_from_copy(copy->second, where);
      parts.push_back(std::move(s.files));
    }
    strategy_->load_state(parts, where);
    parallel::rng_from_raw(rng, where + ": the generator");
    take_position(states.front());
  }

  void take_position(const State& got) {
    step_ = got.step;
    epoch_ = got.epoch;
    next_batch_ = got.next_batch;
    samples_ = samples_at_log_ = got.samples;
    seconds_ = seconds_at_log_ = got.seconds;
    result_.loss = got.loss;
  }

  void report_recovery(int source, int restarted, int64_t bytes) {
    const double took = std::chrono::duration<double>(Clock::now() - recovery_->lost_at).count();
    if (strategy_->reports())
      print("recovered: generation=%d step=%lld source_rank=%d restarted_ranks=%d state_bytes=%lld seconds=%.2f",
            recovery_->generation, static_cast<long long>(step_), source, restarted,
            static_cast<long long>(bytes), took);
  }

  // Buddies: the rank that keeps rank r's copies, and the rank whose copies r keeps. Another
  // host's rank where there are several (LOCAL_WORLD_SIZE below WORLD_SIZE), else the next.
  int holder_of(int r) const { return (r + buddy_shift_) % world_.size(); }
  int source_of(int r) const { return (r - buddy_shift_ + world_.size()) % world_.size(); }

  static int buddy_shift(int world) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int per_host = local ? std::atoi(local) : world;
    return per_host > 0 && per_host < world ? per_host : 1;
  }

  // This rank's state now (a step boundary): the strategy's files (its part, or with
  // `replica` the whole replica) and the generator.
  State current_state(bool replica) {
    State s;
    s.step = step_;
    s.epoch = epoch_;
    s.next_batch = next_batch_;
    s.samples = samples_;
    s.seconds = seconds_ + (in_epoch_ ? seconds_since(epoch_t0_) - eval_seconds_ : 0.0);
    s.loss = result_.loss;
    if (replica) {
      s.files = *strategy_->replica_state();
    } else if (std::string copy = std::move(spare_copy_); strategy_->state_copy(&copy)) {
      s.files[kPartCopy] = std::move(copy);  // pickled only if a recovery takes it
    } else {
      s.files = strategy_->state();
    }
    s.files[kRngRaw] = boundary_step_ == step_ ? boundary_rng_ : parallel::rng_raw();
    return s;
  }

  // Keeps the newest two; the evicted copy's buffer is returned for reuse.
  static std::string keep_two(std::vector<Recovery::Copy>& copies, Recovery::Copy c) {
    copies.push_back(std::move(c));
    std::string evicted;
    if (copies.size() > 2) {
      evicted = std::move(copies.front().blob);
      copies.erase(copies.begin());
    }
    return evicted;
  }

  // Buddies, at a step boundary: this rank's part (copied here, from the live state; packed on
  // the buddies' thread) kept as its own copy and sent to its holder, its source's part
  // received, on the buddies' communicator's thread while this boundary's logging and the
  // next batch go on; collected before the next step's first collective (train_epochs), or at
  // once with `wait`.
  void refresh_buddy(bool wait = false) {
    if (!buddies_) return;
    auto timed = profiler_.phase(profile::Phase::kCommunication);
    collect_buddy();
    const Clock::time_point t0 = Clock::now();
    const double cpu0 = thread_cpu_seconds();
    const int to = holder_of(world_.rank()), from = source_of(world_.rank());
    State state = current_state(false);
    pending_ = std::async(std::launch::async, [comm = buddy_comm_.get(), to, from, step = step_,
                                               state = std::move(state), packed = std::move(spare_pack_),
                                               received = std::move(spare_received_)]() mutable {
      Exchanged got;
      pack(state, &packed);
      got.mine = {step, std::move(packed)};
      if (const auto copy = state.files.find(kPartCopy); copy != state.files.end())
        got.spare = std::move(copy->second);  // the next boundary's copy reuses its pages
      try {
        const std::string& blob = got.mine.blob;
        int64_t out[2] = {static_cast<int64_t>(blob.size()), step};
        int64_t in[2] = {0, -1};
        comm->exchange({comm::P2POp::send(out, 2, comm::DataType::i64, to),
                        comm::P2POp::recv(in, 2, comm::DataType::i64, from)});
        received.resize(static_cast<size_t>(in[0]));
        got.theirs = {in[1], std::move(received)};
        comm->exchange({comm::P2POp::send(blob.data(), blob.size(), comm::DataType::u8, to),
                        comm::P2POp::recv(got.theirs.blob.data(), got.theirs.blob.size(), comm::DataType::u8, from)});
      } catch (...) {
        got.failed = std::current_exception();
      }
      return got;
    });
    buddy_copy_s_.push_back(seconds_since(t0));
    buddy_copy_cpu_s_.push_back(thread_cpu_seconds() - cpu0);
    if (wait) collect_buddy();
  }

  // The last boundary's exchange, waited for: this rank's part joins its own copies, its
  // source's part the kept ones. A failure (a peer lost) is the training's, after this rank's
  // own part is kept.
  void collect_buddy() {
    if (!pending_.valid()) return;
    const Clock::time_point t0 = Clock::now();
    Exchanged got = pending_.get();
    spare_copy_ = std::move(got.spare);
    buddy_wait_s_.push_back(seconds_since(t0));
    buddy_part_bytes_ = static_cast<int64_t>(got.mine.blob.size());
    spare_pack_ = keep_two(own_copies_, std::move(got.mine));
    if (got.failed) std::rethrow_exception(got.failed);
    spare_received_ = keep_two(kept_copies_, std::move(got.theirs));
  }

 public:
  // After a lost peer: what this rank holds goes into the Recovery (nothing changes there when
  // its state was not whole: a failure while a recovery loaded it keeps the previous world's).
  void keep_for_recovery() {
    try {
      collect_buddy();  // what the buddies' exchange in flight got, if it completed
    } catch (const std::exception&) {
    }
    if (!state_valid_) return;
    if (replicated_) {
      recovery_->own = {Recovery::Copy{step_, pack(current_state(true))}};
      recovery_->kept.clear();
      return;
    }
    std::vector<Recovery::Copy> own = own_copies_;
    // Between steps the live part is whole; inside one it may be half updated.
    if (!in_step_ && (own.empty() || own.back().step < step_))
      keep_two(own, Recovery::Copy{step_, pack(current_state(false))});
    recovery_->own = std::move(own);
    recovery_->kept = kept_copies_;
  }

 private:

  // The median and largest step of this run after its first (the first alone when it is
  // the only one): the first allocates what the others reuse.
  void step_times() {
    std::vector<double> t = step_seconds_;
    if (t.size() > 1) t.erase(t.begin());
    if (t.empty()) return;
    result_.worst_step_s = *std::max_element(t.begin(), t.end());
    std::sort(t.begin(), t.end());
    const size_t n = t.size();
    result_.median_step_s = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  }

  // After the last step: the final: line, the model, generated text, the strategy's summary.
  void finish() {
    if (strategy_->reports() && task_->tokens_per_sample() > 0)
      print("step_time: median_s=%.4f worst_s=%.4f steps=%lld", result_.median_step_s, result_.worst_step_s,
            static_cast<long long>(step_seconds_.size()));
    if (strategy_->reports()) {
      std::string metrics;
      for (const auto& [name, value] : result_.metrics) metrics += format(" %s=%.4f", name.c_str(), value);
      print("final: step=%lld loss=%.4f%s samples_per_s=%.1f%s seconds=%.2f",
            static_cast<long long>(step_), result_.loss, metrics.c_str(), result_.samples_per_s,
            tokens_text(result_.samples_per_s).c_str(), result_.seconds);
    }
    if (!hp_.model_dir.empty()) strategy_->save_model(hp_.model_dir);
    if (hp_.generate > 0) {
      const std::string text = generate_bytes(
          [this](const torch::Tensor& x) { return evaluate_on_device(x); }, hp_.block_size,
          hp_.generate, static_cast<uint64_t>(hp_.seed));
      if (strategy_->reports()) out_ << "generated (" << hp_.generate << " bytes):\n" << text << std::endl;
    }
    if (task_->tokens_per_sample() > 0)
      print("memory: rank=%d peak_rss_mb=%.1f", world_.rank(), peak_rss_mb());
    if (buddies_ && !buddy_copy_s_.empty() && !buddy_wait_s_.empty() && strategy_->reports())
      // What keeping the buddies' copies took from this rank's training thread: the part's
      // copy at each boundary, and the wait for the exchange before the next step.
      print("buddies: copies=%zu part_bytes=%lld copy_ms median=%.2f worst=%.2f cpu_median=%.2f wait_ms median=%.2f "
            "worst=%.2f",
            buddy_copy_s_.size(), static_cast<long long>(buddy_part_bytes_),
            1e3 * parallel::pipeline::median(buddy_copy_s_),
            1e3 * *std::max_element(buddy_copy_s_.begin(), buddy_copy_s_.end()),
            1e3 * parallel::pipeline::median(buddy_copy_cpu_s_),
            1e3 * parallel::pipeline::median(buddy_wait_s_),
            1e3 * *std::max_element(buddy_wait_s_.begin(), buddy_wait_s_.end()));
    if (const std::string summary = strategy_->summary();
        !summary.empty() && mesh_.coordinate(parallel::Dim::kData) == 0 &&
        mesh_.coordinate(parallel::Dim::kTensor) == 0)
      out_ << summary << std::endl;
    if (mesh_.size(parallel::Dim::kTensor) > 1 && strategy_->reports()) {
      const parallel::tensor::TensorParallelCounters& c = parallel::tensor::counters();
      print("tensor: allreduces=%lld allgathers=%lld comm_seconds=%.2f of %.2f training seconds",
            static_cast<long long>(c.forward_allreduces + c.backward_allreduces),
            static_cast<long long>(c.allgathers), c.seconds, seconds_);
    }
  }

  // Whether any rank was asked to stop (a collective when there are several ranks).
  bool stop_agreed() {
    if (!stop_) return false;
    const double mine = stop_->load() ? 1.0 : 0.0;
    if (world_.size() == 1) return mine > 0;
    parallel::ProcessGroup world(world_);
    return world.sum({mine})[0] > 0;
  }

  // Saves the state at the current step boundary (once per step): world rank 0 alone for a
  // single-writer strategy, else every rank its part.
  void checkpoint() {
    if (hp_.checkpoint_dir.empty() || step_ == saved_step_) return;
    saved_step_ = step_;
    nlohmann::json meta = {{"step", step_}, {"epoch", epoch_}, {"next_batch", next_batch_}};
    // NaN is not JSON; the loss of a step without a step= line is not needed again.
    if (std::isfinite(result_.loss)) meta["loss"] = result_.loss;
    for (const auto& [name, value] : result_.metrics)
      if (std::isfinite(value)) meta[name] = value;
    if (strategy_->single_writer()) {
      if (world_.rank() != 0) return;
      parallel::CheckpointData data;
      data.step = step_;
      data.meta_json = meta.dump();
      data.files = strategy_->state();
      data.files["rng.pt"] = parallel::rng_to_bytes();
      checkpoints().save(data);
    } else {
      std::map<std::string, std::string> files = strategy_->state();
      files["rng.pt"] = parallel::rng_to_bytes();
      parallel::ProcessGroup world(world_);
      parallel::save_collective(world, checkpoints(), step_, meta.dump(), files);
    }
  }

  // Every rank loads the newest valid checkpoint, if any: the strategy takes what this rank
  // holds from its parts (resharding when another layout wrote it).
  void resume() {
    std::optional<parallel::CheckpointSet> set = checkpoints().load_latest_any(std::cerr);
    if (!set) return;
    const std::string where = "step " + std::to_string(set->step) + " in " + hp_.checkpoint_dir;
    const nlohmann::json meta = nlohmann::json::parse(set->meta_json);
    strategy_->load_state(set->parts, where);
    // heft.torch's save_checkpoint writes no generator state (heft-train's data order comes
    // from the seed and the step, not from the generator; only dropout would draw from it).
    if (set->parts.at(0).count("rng.pt"))
      parallel::rng_from_bytes(set->parts.at(0).at("rng.pt"), "checkpoint " + where + ": rng.pt");
    else if (strategy_->reports())
      print("resume: checkpoint %s has no rng.pt (a heft.torch checkpoint?): the random "
            "generator stays as seeded", where.c_str());
    step_ = saved_step_ = meta.at("step").get<int64_t>();
    epoch_ = meta.at("epoch").get<int64_t>();
    next_batch_ = meta.at("next_batch").get<int64_t>();
    result_.loss = meta.value("loss", std::numeric_limits<double>::quiet_NaN());
    for (auto& [name, value] : result_.metrics)
      value = meta.value(name, std::numeric_limits<double>::quiet_NaN());
    result_.resumed_from = step_;
    if (strategy_->reports())
      print("resumed: step=%lld epoch=%lld", static_cast<long long>(step_),
            static_cast<long long>(epoch_));
  }

  parallel::CheckpointDirectory checkpoints() const {
    const int keep = hp_.checkpoint_keep > 0 ? static_cast<int>(hp_.checkpoint_keep) : 2;
    return parallel::CheckpointDirectory(hp_.checkpoint_dir, keep);
  }

  // Reduces the step's loss over the data group (collective) and prints its step= line.
  void log_step(int64_t epoch, double lr, const torch::Tensor& loss_sum, int64_t global_count,
                double now) {
    result_.loss = strategy_->loss_total(loss_sum) / static_cast<double>(global_count);
    const double samples_per_s =
        static_cast<double>(samples_ - samples_at_log_) / (now - seconds_at_log_);
    if (strategy_->reports())
      print("step=%lld epoch=%lld loss=%.4f lr=%.6g samples_per_s=%.1f%s",
            static_cast<long long>(step_), static_cast<long long>(epoch), result_.loss, lr,
            samples_per_s, tokens_text(samples_per_s).c_str());
    seconds_at_log_ = now;
    samples_at_log_ = samples_;
  }

  // " tokens_per_s=T" for a token task, else nothing.
  std::string tokens_text(double samples_per_s) const {
    const int64_t t = task_->tokens_per_sample();
    return t > 0 ? format(" tokens_per_s=%.1f", samples_per_s * static_cast<double>(t)) : "";
  }

  // Every rank: the bytes of state it holds between steps (after the first, when the
  // optimizer's state exists).
  void print_memory() {
    memory_printed_ = true;
    if (task_->tokens_per_sample() == 0) return;  // the image task's output stays as it was
    const StateBytes b = strategy_->state_bytes();
    print("memory: rank=%d params_bytes=%lld grads_bytes=%lld optimizer_bytes=%lld",
          world_.rank(), static_cast<long long>(b.params), static_cast<long long>(b.grads),
          static_cast<long long>(b.optimizer));
  }

  // The strategy's evaluation of CPU inputs on the run's device, the outputs on the CPU (the
  // tasks' metrics and sampling work there).
  torch::Tensor evaluate_on_device(const torch::Tensor& x) {
    if (device_.is_cpu()) return strategy_->evaluate(x);
    return strategy_->evaluate(x.to(device_)).to(torch::kCPU);
  }

  // "epoch=E test_loss=..." or "step=N val_loss=...".
  void log_evaluation(const char* unit, int64_t at) {
    const Metrics m = task_->evaluate(
        [this](const torch::Tensor& x) { return evaluate_on_device(x); },
        strategy_->data_group());
    evaluated_step_ = step_;
    std::string line = format("%s=%lld", unit, static_cast<long long>(at));
    for (const auto& [name, value] : m) {
      line += format(" %s=%.4f", name.c_str(), value);
      for (auto& [kept, v] : result_.metrics)
        if (kept == name) v = value;
    }
    if (strategy_->reports()) out_ << line << std::endl;
  }

  template <typename... Args>
  static std::string format(const char* f, Args... args) {
    char line[256];
    std::snprintf(line, sizeof(line), f, args...);
    return line;
  }
  template <typename... Args>
  void print(const char* f, Args... args) {
    out_ << format(f, args...) << std::endl;
  }

  const Hyperparameters& hp_;
  const std::atomic<bool>* stop_;
  Recovery* recovery_;  // null: no in-place recovery
  comm::Communicator& world_;
  std::ostream& out_;
  parallel::DeviceMesh mesh_;
  std::unique_ptr<Task> task_;
  const OptimizerConfig optimizer_config_;
  const torch::Device device_;  // the model's and the batches'
  std::unique_ptr<Strategy> strategy_;
  const int sharded_degree_;
  TrainResult result_;
  int64_t step_ = 0, samples_ = 0, samples_at_log_ = 0;
  // Where the next step is: 1-based epoch, 0-based batch within it; the last saved step.
  int64_t epoch_ = 1, next_batch_ = 0, saved_step_ = -1;
  double seconds_ = 0, seconds_at_log_ = 0;  // training time so far; at the last step= line
  double eval_seconds_ = 0;                  // evaluation inside the current epoch
  bool memory_printed_ = false;
  bool state_valid_ = false;             // the state is whole (after a resume or recovery)
  bool in_step_ = false;                 // inside strategy_->step(): a part may be half updated
  const bool replicated_ = strategy_->replicated_state();
  // In-place recovery with buddies (not data parallel): the copies this rank holds.
  const bool buddies_ = recovery_ && recovery_->enabled && world_.size() > 1 && !replicated_;
  const int buddy_shift_ = buddy_shift(world_.size());
  std::vector<Recovery::Copy> own_copies_, kept_copies_;
  std::unique_ptr<comm::Communicator> buddy_comm_;  // the buddies' copies travel here
  struct Exchanged {
    Recovery::Copy mine, theirs;
    std::exception_ptr failed;  // the exchange's failure (mine is whole)
    std::string spare;          // the boundary's copy buffer, packed into mine
  };
  // Buffers already resident, for the next boundary: the part's copy, the packed state (the
  // own copy evicted), the buddy-source's part received (the kept copy evicted).
  std::string spare_copy_, spare_pack_, spare_received_;
  // The training thread's share of the buddies' copies, per boundary: wall and CPU seconds of
  // the copy (wall - CPU: the thread waited for a core), wall seconds waiting for the exchange.
  std::vector<double> buddy_copy_s_, buddy_copy_cpu_s_, buddy_wait_s_;
  int64_t buddy_part_bytes_ = 0;                      // the last packed part
  std::future<Exchanged> pending_;       // the last boundary's exchange (after buddy_comm_:
                                         // destroyed first, it waits for the exchange)
  Clock::time_point epoch_t0_;           // the current epoch's training clock, while in_epoch_
  bool in_epoch_ = false;
  std::string boundary_rng_;             // the generator at the start of step boundary_step_ + 1
  int64_t boundary_step_ = -1;
  std::vector<double> step_seconds_;         // this run's steps, wall time
  int64_t evaluated_step_ = -1;              // the step of the last evaluation
  // Step timings for the supervisor (step_profiler/step_profiler.h); active while run() runs.
  profile::StepProfiler profiler_ = profile::StepProfiler::from_env();
  struct Activation {
    explicit Activation(profile::StepProfiler* p) { profile::StepProfiler::activate(p); }
    ~Activation() { profile::StepProfiler::activate(nullptr); }
  };
  Activation activation_{&profiler_};
};

}  // namespace

TrainResult train(const Hyperparameters& hp, const config::Distribution& distribution,
                  const std::string& test_dir, comm::Communicator& world, std::ostream& out,
                  const std::atomic<bool>* stop, Recovery* recovery) {
  Training training(hp, distribution, test_dir, world, out, stop, recovery);
  try {
    return training.run();
  } catch (const PeerLost&) {
    if (recovery && recovery->enabled) {
      recovery->lost_at = std::chrono::steady_clock::now();
      training.keep_for_recovery();
    }
    throw;
  }
}

}  // namespace heft::train
