// Starting and reaping children (process.h).
//
// spawn() prepares everything in the parent (the resolved path, argv and envp as C arrays)
// because the launcher has other threads (the store server): between fork and execve the
// child may only make async-signal-safe calls. An exec failure travels back through a
// close-on-exec "exec pipe": EOF means execve succeeded, an ExecFailure is the child's errno
// (and, when the child's /opt/ml could not be made, the step that failed: opt_ml.h).
#include "heft/job/launch/process.h"

#include "heft/job/launch/opt_ml.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

namespace heft::job {

namespace {

constexpr const char* kDefaultPath = "/bin:/usr/bin";

SpawnError spawn_error(const std::string& command, int err) {
  const char* reason = ::strerrordesc_np(err);  // "No such file or directory", as a shell says
  return SpawnError("cannot execute '" + command + "': " +
                        (reason ? reason : "error " + std::to_string(err)),
                    err == ENOENT ? 127 : 126);
}

// 0 when `path` is an executable file; ENOENT when nothing is there; EACCES when what is
// there is not an executable file.
int executable_error(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ENOENT;
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) return EACCES;
  return 0;
}

// The path execve() gets for `name`: as given when it has a '/', else the first executable
// file on PATH. Throws the SpawnError a shell's code goes with when none fits (not found,
// or found but not executable: as execvp).
std::string resolve_command(const std::string& name, const Environment& env) {
  if (name.empty()) throw spawn_error(name, ENOENT);
  if (name.find('/') != std::string::npos) return name;
  const auto path_var = env.find("PATH");
  const std::string path = path_var == env.end() ? kDefaultPath : path_var->second;
  int err = ENOENT;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == begin ? "." : path.substr(begin, end - begin);
    const std::string candidate = dir + "/" + name;
    const int found = executable_error(candidate);
    if (found == 0) return candidate;
    if (found == EACCES) err = EACCES;
    begin = end + 1;
  }
  throw spawn_error(name, err);
}

void make_pipe(int fds[2], const char* what) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw IoError(std::string("heft: cannot create the ") + what + " pipe: " +
                  errno_string(errno));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

struct Pipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int exec[2] = {-1, -1};
  ~Pipes() {
    for (int* p : {out, err, exec}) {
      close_fd(p[0]);
      close_fd(p[1]);
    }
  }
};

// What the exec pipe carries when the child could not run the command. `step` points at a
// string literal, at the same address in the parent (a fork's copy of the same program).
struct ExecFailure {
  int err = 0;
  const char* step = nullptr;  // null: execve failed; else the /opt/ml step that failed
};

// Runs in the forked child: async-signal-safe calls only, never returns.
[[noreturn]] void exec_child(const Pipes& pipes, pid_t parent, const char* path,
                             char* const* argv, char* const* envp, const cpu_set_t* cpus,
                             int mask, int cgroup_procs_fd, const OptMlPlan& opt_ml) {
  if (cgroup_procs_fd >= 0) {  // first, so that nothing this child starts is outside it
    ssize_t joined = ::write(cgroup_procs_fd, "0", 1);
    (void)joined;  // best effort: the subreaper still catches what leaves the group
  }
  if (mask >= 0) ::umask(static_cast<mode_t>(mask));
  if (opt_ml.enabled) {
    ExecFailure failure;
    failure.err = enter_opt_ml(opt_ml, &failure.step);
    if (failure.err != 0) {
      ssize_t ignored = ::write(pipes.exec[1], &failure, sizeof(failure));
      (void)ignored;
      ::_exit(126);
    }
  }
  if (cpus) ::sched_setaffinity(0, sizeof(*cpus), cpus);  // best effort: a CPU may be offline
  // Every disposition back to its default (an ignored SIGTERM or SIGUSR1 of the launcher's
  // parent must not reach the worker), then nothing blocked.
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) ::dup2(devnull, 0);
  if (pipes.out[1] >= 0) ::dup2(pipes.out[1], 1);
  if (pipes.err[1] >= 0) ::dup2(pipes.err[1], 2);
  ::execve(path, argv, envp);
  ExecFailure failure;
  failure.err = errno;
  ssize_t ignored = ::write(pipes.exec[1], &failure, sizeof(failure));
  (void)ignored;
  ::_exit(127);
}

// Blocks until the child has exec'd (EOF) or reported why not; err 0: it runs.
ExecFailure read_exec_failure(int fd) {
  ExecFailure failure;
  ssize_t n;
  do {
    n = ::read(fd, &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(failure)) ? failure : ExecFailure{};
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::unique_ptr<Process> Process::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) throw InvalidArgument("heft: spawn: empty command");
  const std::string path = resolve_command(options.argv[0], options.env);
  std::vector<std::string> argv_strings = options.argv;
  std::vector<std::string> env_strings = to_envp(options.env);
  std::vector<char*> argv = c_strings(argv_strings);
  std::vector<char*> envp = c_strings(env_strings);
  const OptMlPlan opt_ml = options.opt_ml ? opt_ml_plan(options.env) : OptMlPlan{};

  Pipes pipes;
  if (options.capture_output) {
    make_pipe(pipes.out, "stdout");
    make_pipe(pipes.err, "stderr");
  }
  make_pipe(pipes.exec, "exec");
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : options.cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
  const pid_t parent = ::getpid();
  // All signals blocked across fork: the child must not run the parent's handlers before
  // exec_child() resets them (it then unblocks everything).
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t pid = ::fork();
  const int fork_errno = errno;
  if (pid == 0)
    exec_child(pipes, parent, path.c_str(), argv.data(), envp.data(),
               options.cpus.empty() ? nullptr : &cpus, options.umask, options.cgroup_procs_fd,
               opt_ml);
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) throw IoError("heft: cannot fork: " + errno_string(fork_errno));

  note_spawned(pid);
  ::setpgid(pid, pid);  // also here, so signal_group() works before the child runs
  close_fd(pipes.out[1]);
  close_fd(pipes.err[1]);
  close_fd(pipes.exec[1]);
  std::unique_ptr<Process> child(new Process(pid, pipes.out[0], pipes.err[0]));
  pipes.out[0] = pipes.err[0] = -1;  // owned by child now
  for (int fd : {child->out_fd_, child->err_fd_})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const ExecFailure failure = read_exec_failure(pipes.exec[0]);
  if (failure.step != nullptr)  // ~Process reaps
    throw SpawnError("cannot give '" + options.argv[0] + "' the job's /opt/ml (" + failure.step +
                         "): " + errno_string(failure.err) +
                         "; set HEFT_OPT_ML=0 in the spec's environment to run without it",
                     126);
  if (failure.err != 0) throw spawn_error(options.argv[0], failure.err);
  return child;
}

Process::~Process() {
  close_stdout();
  close_stderr();
  if (reaped_) return;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  note_reaped(pid_);
}

void Process::close_stdout() { close_fd(out_fd_); }
void Process::close_stderr() { close_fd(err_fd_); }

bool Process::signal_group(int sig) {
  if (reaped_) return false;
  return ::kill(-pid_, sig) == 0 || ::kill(pid_, sig) == 0;
}

bool Process::try_reap() {
  if (reaped_) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    mark_reaped(status);
  } else if (r < 0 && errno == ECHILD) {
    mark_reaped(0);  // reaped elsewhere (a waitpid(-1) we do not own); status unknown
  }
  return reaped_;
}

void Process::mark_reaped(int status) {
  reaped_ = true;
  note_reaped(pid_);
  wait_status_ = status;
  // The group id stays reserved while any member lives, so this reaches only leftovers.
  ::kill(-pid_, SIGKILL);
}

namespace {
std::mutex g_spawned_mu;
std::set<pid_t>& spawned() {
  static auto* s = new std::set<pid_t>();  // outlives every thread that may reap at exit
  return *s;
}
}  // namespace

bool spawned_by_heft(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_spawned_mu);
  return spawned().count(pid) != 0;
}

void note_spawned(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_spawned_mu);
  spawned().insert(pid);
}

void note_reaped(pid_t pid) {
  std::lock_guard<std::mutex> lock(g_spawned_mu);
  spawned().erase(pid);
}

CommandOutput run_command(SpawnOptions options, std::chrono::milliseconds timeout) {
  options.capture_output = true;
  std::unique_ptr<Process> p = Process::spawn(options);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CommandOutput r;
  auto drain = [](int fd, std::string& into) {
    char buf[8192];
    for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof(buf))) > 0;)
      into.append(buf, static_cast<size_t>(n));
  };
  bool timed_out = false;
  while (!p->try_reap()) {
    drain(p->stdout_fd(), r.out);
    drain(p->stderr_fd(), r.err);
    if (std::chrono::steady_clock::now() > deadline) {
      timed_out = true;
      p->signal_group(SIGKILL);
    }
    ::usleep(2000);
  }
  drain(p->stdout_fd(), r.out);
  drain(p->stderr_fd(), r.err);
  r.exit_code = timed_out ? 124 : shell_exit_code(p->wait_status());
  return r;
}

int shell_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status))
    return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

long long process_start_ticks(pid_t pid) {
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  // "pid (comm) state ppid ..." where comm may hold spaces and parentheses: fields are
  // counted from the last ')'. state is field 3, starttime field 22.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return -1;
  if (p[2] == 'Z' || p[2] == 'X') return -1;
  int field = 2;
  for (p += 1; *p != '\0' && field < 22; ++p)
    if (*p == ' ') ++field;
  return field == 22 ? std::strtoll(p, nullptr, 10) : -1;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev == nullptr) return "signal " + std::to_string(sig);
  return std::string("SIG") + abbrev;
}

std::string proc_stat_field(pid_t pid, int n) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return "";
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= n; ++i)
    if (!(rest >> field)) return "";
  return field;
}

}  // namespace heft::job
