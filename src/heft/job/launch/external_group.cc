#include "heft/job/launch/external_group.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <utility>

#include <nlohmann/json.hpp>

#include "heft/contract/worker.h"
#include "heft/error.h"
#include "heft/job/launch/local_launcher.h"

namespace heft::job {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kAbortWait{5};
// How often the engine's pipes and state are looked at.
constexpr useconds_t kPollMicros = 10000;

volatile sig_atomic_t g_signal = 0;
void note_signal(int sig) { g_signal = sig; }

// While alive, `signals` only note themselves in g_signal (cleared on entry and on exit);
// the handlers before come back after.
class SignalNote {
 public:
  explicit SignalNote(std::initializer_list<int> signals) {
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    for (int sig : signals) {
      old_.push_back({sig, {}});
      ::sigaction(sig, &sa, &old_.back().second);
    }
    g_signal = 0;
  }
  ~SignalNote() {
    for (const auto& [sig, old] : old_) ::sigaction(sig, &old, nullptr);
    g_signal = 0;
  }
  SignalNote(const SignalNote&) = delete;
  SignalNote& operator=(const SignalNote&) = delete;

 private:
  std::vector<std::pair<int, struct sigaction>> old_;
};

// Splits what the engine's pipes have into lines and hands each rank's to the hooks; the
// engine's own lines go to our stderr.
class Lines {
 public:
  Lines(const ExternalGroup& g, const LauncherHooks& hooks) : g_(g), hooks_(hooks) {}
  // The first rank the engine said failed, and its exit code (-1 if none).
  int failed_rank = -1, failed_code = 0;
  // Reads what `fd` has now; false at end of file, where a last line without '\n' is
  // delivered too.
  bool read(int fd, LineSplitter& lines) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n == 0) {
        lines.flush([this](std::string_view l) { line(l); });
        return false;
      }
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      lines.feed(std::string_view(buf, static_cast<size_t>(n)),
                 [this](std::string_view l) { line(l); });
    }
  }

 private:
  void line(std::string_view l) {
    ExternalLine x;
    if (g_.parse(l, &x) && x.rank >= 0 && x.rank < g_.world && hooks_.on_line) {
      hooks_.on_line(x.rank, x.is_stderr, x.text);
      return;
    }
    std::cerr << g_.log_name << ": " << g_.engine << ": " << l << "\n";
    int rank = -1, code = 0;
    if (failed_rank < 0 && g_.rank_exit && g_.rank_exit(l, &rank, &code) && rank >= 0 &&
        rank < g_.world) {
      failed_rank = rank;
      failed_code = code;
    }
  }
  const ExternalGroup& g_;
  const LauncherHooks& hooks_;
};

// One start of the group under its engine, from the engine's start to its reaping: its
// output, the signals this process receives, the hooks' ticks, and an engine that hangs in
// its own abort.
class EngineRun {
 public:
  EngineRun(const ExternalGroup& g, const LauncherHooks& hooks, std::chrono::milliseconds grace,
            const ExternalStart& start, Process& engine, int restart_count)
      : g_(g), hooks_(hooks), grace_(grace), start_(start), engine_(engine), lines_(g, hooks) {
    end_.restart_count = restart_count;
  }

  GroupEnd run() {
    while (!step()) ::usleep(kPollMicros);
    return conclude();
  }

 private:
  // One look at the engine; true once it is reaped.
  bool step() {
    if (out_open_ && !lines_.read(engine_.stdout_fd(), out_)) out_open_ = false;
    if (err_open_ && !lines_.read(engine_.stderr_fd(), err_)) err_open_ = false;
    if (engine_.try_reap()) {  // what it wrote last is in the pipes: read it once more
      if (out_open_) lines_.read(engine_.stdout_fd(), out_);
      if (err_open_) lines_.read(engine_.stderr_fd(), err_);
      return true;
    }
    if (g_signal && !end_.interrupt_signal) {
      end_.interrupt_signal = g_signal;
      stop(g_signal);  // the engine stops its ranks on every host
    }
    if (Clock::now() >= next_tick_) {
      next_tick_ += hooks_.tick;
      tick();
    }
    if (kill_at_ && Clock::now() >= *kill_at_) {
      engine_.signal_group(SIGKILL);
      kill_at_.reset();
    }
    return false;
  }

  void tick() {
    // A rank recorded a failure: the engine should end the group by itself, but one that
    // cannot reach a lost host may hang in its own abort (mpirun does): after `grace` and
    // kAbortWait more it is stopped as if asked to.
    if (!abort_seen_ && start_.abort_record(g_.group)) {
      abort_seen_ = abort_pending_ = true;
      abort_deadline_ = Clock::now() + grace_ + kAbortWait;
    }
    if (abort_pending_ && Clock::now() >= abort_deadline_ && !kill_at_) {
      std::cerr << g_.log_name << ": " << g_.engine << " did not end the group "
                << std::chrono::duration_cast<std::chrono::seconds>(grace_ + kAbortWait).count()
                << " s after a rank failed; stopping it" << std::endl;
      stop(SIGTERM);
      abort_pending_ = false;
    }
    report_exits();
    if (hooks_.on_tick && hooks_.on_tick() && !end_.stop_requested && !end_.interrupt_signal) {
      end_.stop_requested = true;
      stop(SIGTERM);
    }
  }

  // Ranks whose worker shim recorded their end since the last tick, to hooks.on_exit.
  void report_exits() {
    if (!hooks_.on_exit) return;
    if (exited_.empty()) exited_.assign(static_cast<size_t>(g_.world), false);
    for (int r = 0; r < g_.world; ++r) {
      if (exited_[static_cast<size_t>(r)]) continue;
      const std::optional<std::string> v = start_.peek(g_.group + "/exit/" + std::to_string(r));
      if (!v) continue;
      exited_[static_cast<size_t>(r)] = true;
      hooks_.on_exit(r, std::atoi(v->c_str()));
    }
  }

  // `sig` to the engine's group now, SIGKILL after the grace.
  void stop(int sig) {
    engine_.signal_group(sig);
    kill_at_ = Clock::now() + grace_;
  }

  // The end of the reaped engine: its code and, for a failure, the rank and host to blame.
  GroupEnd conclude() {
    const int code = shell_exit_code(engine_.wait_status());
    end_.exit_code = end_.interrupt_signal ? 128 + end_.interrupt_signal : code;
    if (code == 0 || end_.stop_requested || end_.interrupt_signal) return end_;
    end_.failed_wait_status = engine_.wait_status();
    // A rank the engine saw exit with a code failed by itself (its peers then record it as
    // lost); otherwise name the host that was lost, from the ranks' record of whom they lost.
    if (lines_.failed_rank >= 0) {
      end_.failed_rank = lines_.failed_rank;
      end_.failed_wait_status = (lines_.failed_code & 0xff) << 8;  // as waitpid's exit
    } else if (const std::optional<std::string> why = start_.abort_record(g_.group)) {
      const auto nl = why->find('\n');
      const int peer = std::atoi(why->substr(0, nl).c_str());
      if (peer >= 0 && peer < g_.world) {
        end_.failed_rank = peer;
        end_.failure_detail = "host " + g_.host_of_rank(peer) + " was lost (rank " +
                              std::to_string(peer) + " on it stopped answering: " +
                              (nl == std::string::npos ? "" : why->substr(nl + 1)) + ")";
      }
    }
    return end_;
  }

  const ExternalGroup& g_;
  const LauncherHooks& hooks_;
  const std::chrono::milliseconds grace_;
  const ExternalStart& start_;
  Process& engine_;
  Lines lines_;
  // The engine's output is tagged by rank: a line is kept whole however long.
  LineSplitter out_{LineSplitter::kNoLimit}, err_{LineSplitter::kNoLimit};
  bool out_open_ = true, err_open_ = true;
  Clock::time_point next_tick_ = Clock::now() + hooks_.tick;
  std::optional<Clock::time_point> kill_at_;
  bool abort_seen_ = false, abort_pending_ = false;
  std::vector<bool> exited_;  // by rank: handed to hooks.on_exit
  Clock::time_point abort_deadline_ = Clock::now();
  GroupEnd end_;
};

}  // namespace

std::string engine_variable(const Environment& env, const char* name, const char* worker,
                            const char* launcher) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty())
    throw InvalidArgument(std::string(name) + " is not set: heft " + worker +
                          " runs under `heft run --launcher " + launcher + "` (docs/clusters.md)");
  return it->second;
}

int engine_int(const Environment& env, const char* name, const char* worker,
               const char* launcher) {
  const std::string v = engine_variable(env, name, worker, launcher);
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || x < 0)
    throw InvalidArgument(std::string(name) + ": expected a non-negative integer, found '" + v + "'");
  return static_cast<int>(x);
}

Environment engine_worker_environment(Environment env, int rank, int size, int local_rank,
                                      int local_size, int host,
                                      const std::vector<std::string>& hosts) {
  env["RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = std::to_string(size);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(local_size);
  env["GROUP_RANK"] = std::to_string(host);
  env["SM_HOSTS"] = nlohmann::json(hosts).dump();
  env["SM_CURRENT_HOST"] = hosts[static_cast<size_t>(host)];
  contract::HeftVariables heft;
  heft.host = hosts[static_cast<size_t>(host)];
  heft.write(env);
  env.emplace("TORCHELASTIC_RESTART_COUNT", "0");
  const int cpus = available_cpus();
  env["SM_NUM_CPUS"] = std::to_string(cpus);
  env["SM_NUM_GPUS"] = std::to_string(visible_gpus());
  env.emplace("OMP_NUM_THREADS", std::to_string(std::max(1, cpus / std::max(1, local_size))));
  return env;
}

Environment engine_start_variables(const EngineOptions& o, const std::string& bind,
                                   int store_port, const std::string& token,
                                   const std::string& pythonpath) {
  Environment vars;
  contract::HeftVariables heft;
  heft.store = bind + ":" + std::to_string(store_port);
  heft.token = token;
  heft.job = o.job_name;
  heft.timeout_s = o.timeout_s;
  heft.stop_grace_ms = o.worker_grace.count();
  heft.write(vars);
  vars["MASTER_PORT"] = std::to_string(free_port(bind));
  if (!o.python_path.empty())
    vars["PYTHONPATH"] = o.python_path + (pythonpath.empty() ? "" : ":" + pythonpath);
  return vars;
}

void append_worker_shim(std::vector<std::string>& argv, const EngineOptions& o,
                        const char* worker) {
  argv.push_back(o.heft_binary);
  argv.push_back(worker);
  argv.push_back("--");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
}

GroupEnd run_external_group(const ExternalGroup& g, const LauncherHooks& hooks,
                            std::chrono::milliseconds grace) {
  SignalNote note({SIGINT, SIGTERM, SIGHUP});
  for (int restart_count = 0;; ++restart_count) {
    std::unique_ptr<ExternalStart> start = g.start();
    SpawnOptions spawn = start->spawn();
    spawn.env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count);
    spawn.capture_output = true;
    std::unique_ptr<Process> engine;
    try {
      engine = Process::spawn(spawn);
    } catch (const SpawnError& e) {
      GroupEnd end;
      end.restart_count = restart_count;
      end.exit_code = e.exit_code();
      end.spawn_error = e.what();
      return end;
    }
    if (hooks.on_start) hooks.on_start(restart_count, {});
    if (hooks.on_store)
      hooks.on_store([s = start.get()](const std::string& key) { return s->peek(key); });
    const GroupEnd end = EngineRun(g, hooks, grace, *start, *engine, restart_count).run();
    if (hooks.on_store) hooks.on_store({});  // the start (and its store) goes away
    if (end.interrupt_signal || !hooks.restart || !hooks.restart(end)) return end;
  }
}

int run_external_passthrough(const ExternalStart& start, const std::string& log_name,
                             const std::string& install_hint) {
  SpawnOptions spawn = start.spawn();
  spawn.capture_output = false;
  SignalNote note({SIGINT, SIGTERM});
  std::unique_ptr<Process> engine;
  try {
    engine = Process::spawn(spawn);
  } catch (const SpawnError& e) {
    std::cerr << log_name << ": " << e.what() << " (install " << install_hint << ")" << std::endl;
    return e.exit_code();
  }
  int forwarded = 0;
  while (!engine->try_reap()) {
    if (g_signal && g_signal != forwarded) {
      forwarded = g_signal;
      engine->signal_group(forwarded);  // the engine stops its ranks on every host
    }
    ::usleep(20000);
  }
  return shell_exit_code(engine->wait_status());
}

}  // namespace heft::job
