#include "heft/job/launch/external_group.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "heft/error.h"

namespace heft::job {

namespace {

constexpr std::chrono::seconds kAbortWait{5};

volatile sig_atomic_t g_signal = 0;
void note_signal(int sig) { g_signal = sig; }

// Splits what a pipe has into lines and hands each to the hooks (or our stderr).
class Lines {
 public:
  Lines(const ExternalGroup& g, const LocalLauncherHooks& hooks) : g_(g), hooks_(hooks) {}
  // The first rank the engine said failed, and its exit code (-1 if none).
  int failed_rank = -1, failed_code = 0;
  // Reads what `fd` has now; false at end of file.
  bool read(int fd, std::string& pending) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      pending.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
        line(std::string_view(pending).substr(start, nl - start));
      pending.erase(0, start);
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
  const LocalLauncherHooks& hooks_;
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
  env["HEFT_HOST"] = hosts[static_cast<size_t>(host)];
  env.emplace("TORCHELASTIC_RESTART_COUNT", "0");
  const int cpus = available_cpus();
  env["SM_NUM_CPUS"] = std::to_string(cpus);
  env["SM_NUM_GPUS"] = "0";
  env.emplace("OMP_NUM_THREADS", std::to_string(std::max(1, cpus / std::max(1, local_size))));
  return env;
}

Environment engine_start_variables(const EngineOptions& o, const std::string& bind,
                                   int store_port, const std::string& token,
                                   const std::string& pythonpath) {
  Environment vars;
  vars["HEFT_STORE"] = bind + ":" + std::to_string(store_port);
  vars["HEFT_TOKEN"] = token;
  vars["HEFT_JOB"] = o.job_name;
  vars["HEFT_TIMEOUT"] = std::to_string(o.timeout_s);
  vars["MASTER_PORT"] = std::to_string(free_port(bind));
  if (!o.python_path.empty())
    vars["PYTHONPATH"] = o.python_path + (pythonpath.empty() ? "" : ":" + pythonpath);
  return vars;
}

GroupEnd run_external_group(const ExternalGroup& g, const LocalLauncherHooks& hooks,
                            std::chrono::milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  struct sigaction sa {}, old_int {}, old_term {}, old_hup {};
  sa.sa_handler = note_signal;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);
  g_signal = 0;
  struct Restore {
    struct sigaction i, t, h;
    ~Restore() {
      ::sigaction(SIGINT, &i, nullptr);
      ::sigaction(SIGTERM, &t, nullptr);
      ::sigaction(SIGHUP, &h, nullptr);
      g_signal = 0;
    }
  } restore{old_int, old_term, old_hup};
  for (int restart_count = 0;; ++restart_count) {
    GroupEnd end;
    end.restart_count = restart_count;
    std::unique_ptr<ExternalStart> start = g.start();
    SpawnOptions spawn = start->spawn();
    spawn.env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count);
    spawn.capture_output = true;
    std::unique_ptr<Process> engine;
    try {
      engine = Process::spawn(spawn);
    } catch (const SpawnError& e) {
      end.exit_code = e.exit_code();
      end.spawn_error = e.what();
      return end;
    }
    if (hooks.on_start) hooks.on_start(restart_count, {});
    Lines lines(g, hooks);
    std::string out_pending, err_pending;
    bool out_open = true, err_open = true;
    Clock::time_point next_tick = Clock::now() + hooks.tick;
    std::optional<Clock::time_point> kill_at;
    bool abort_seen = false, abort_pending = false;
    Clock::time_point abort_deadline = Clock::now();
    for (;;) {
      if (out_open && !lines.read(engine->stdout_fd(), out_pending)) out_open = false;
      if (err_open && !lines.read(engine->stderr_fd(), err_pending)) err_open = false;
      if (engine->try_reap()) {  // what it wrote last is in the pipes: read it once more
        if (out_open) lines.read(engine->stdout_fd(), out_pending);
        if (err_open) lines.read(engine->stderr_fd(), err_pending);
        break;
      }
      if (g_signal && !end.interrupt_signal) {
        end.interrupt_signal = g_signal;
        engine->signal_group(g_signal);  // the engine stops its ranks on every host
        kill_at = Clock::now() + grace;
      }
      if (Clock::now() >= next_tick) {
        next_tick += hooks.tick;
        // A rank recorded a failure: the engine should end the group by itself, but one that
        // cannot reach a lost host may hang in its own abort (mpirun does): after `grace`
        // and kAbortWait more it is stopped as if asked to.
        if (!abort_seen && start->abort_record(g.group)) {
          abort_seen = abort_pending = true;
          abort_deadline = Clock::now() + grace + kAbortWait;
        }
        if (abort_pending && Clock::now() >= abort_deadline && !kill_at) {
          std::cerr << g.log_name << ": " << g.engine << " did not end the group " 
                    << std::chrono::duration_cast<std::chrono::seconds>(grace + kAbortWait).count()
                    << " s after a rank failed; stopping it" << std::endl;
          engine->signal_group(SIGTERM);
          kill_at = Clock::now() + grace;
          abort_pending = false;
        }
        if (hooks.on_tick && hooks.on_tick() && !end.stop_requested && !end.interrupt_signal) {
          end.stop_requested = true;
          engine->signal_group(SIGTERM);
          kill_at = Clock::now() + grace;
        }
      }
      if (kill_at && Clock::now() >= *kill_at) {
        engine->signal_group(SIGKILL);
        kill_at.reset();
      }
      ::usleep(10000);
    }
    const int code = shell_exit_code(engine->wait_status());
    end.exit_code = end.interrupt_signal ? 128 + end.interrupt_signal : code;
    if (code != 0 && !end.stop_requested && !end.interrupt_signal) {
      end.failed_wait_status = engine->wait_status();
      // A rank the engine saw exit with a code failed by itself (its peers then record it
      // as lost); otherwise name the host that was lost, from the ranks' record of whom
      // they lost.
      if (lines.failed_rank >= 0) {
        end.failed_rank = lines.failed_rank;
        end.failed_wait_status = (lines.failed_code & 0xff) << 8;  // as waitpid's exit
      } else if (const std::optional<std::string> why = start->abort_record(g.group)) {
        const auto nl = why->find('\n');
        const int peer = std::atoi(why->substr(0, nl).c_str());
        if (peer >= 0 && peer < g.world) {
          end.failed_rank = peer;
          end.failure_detail = "host " + g.host_of_rank(peer) + " was lost (rank " +
                               std::to_string(peer) + " on it stopped answering: " +
                               (nl == std::string::npos ? "" : why->substr(nl + 1)) + ")";
        }
      }
    }
    if (end.interrupt_signal || !hooks.restart || !hooks.restart(end)) return end;
  }
}

int run_external_passthrough(const ExternalStart& start, const std::string& log_name,
                             const std::string& install_hint) {
  SpawnOptions spawn = start.spawn();
  spawn.capture_output = false;
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = note_signal;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  g_signal = 0;
  struct Restore {
    struct sigaction i, t;
    ~Restore() {
      ::sigaction(SIGINT, &i, nullptr);
      ::sigaction(SIGTERM, &t, nullptr);
      g_signal = 0;
    }
  } restore{old_int, old_term};
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
