// /opt/ml in a worker's own mount namespace (opt_ml.h). The child side uses raw system calls
// and fixed buffers only: it runs between fork and execve in a multi-threaded launcher.
#include "heft/job/launch/opt_ml.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "heft/error.h"

namespace heft::job {

namespace fs = std::filesystem;

namespace {

std::string value(const Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// `path`, created when missing.
std::string made(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw IoError("cannot create " + path + " for /opt/ml: " + ec.message());
  return path;
}

// The folder variable `name` names, created when missing.
std::string folder(const Environment& env, const char* name) {
  const std::string v = value(env, name);
  if (v.empty())
    throw InvalidArgument(std::string("HEFT_OPT_ML=1 needs ") + name +
                          " (the job folder /opt/ml maps), which is unset");
  return made(v);
}

// ---- the child's side: no allocation, no locks ----------------------------------------

// dst = a + b + c (each may be null); false when it would not fit.
bool join(char* dst, size_t size, const char* a, const char* b = nullptr, const char* c = nullptr) {
  size_t n = 0;
  for (const char* part : {a, b, c}) {
    if (!part) continue;
    const size_t len = ::strlen(part);
    if (n + len + 1 > size) return false;
    ::memcpy(dst + n, part, len);
    n += len;
  }
  dst[n] = '\0';
  return true;
}

void decimal(int v, char* out) {  // v >= 0
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (int i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  out[n] = '\0';
}

int write_file(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = ::write(fd, text, ::strlen(text));
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

struct LinuxDirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Every entry of the machine's /opt (listed through `list`, reached through `real`) made again
// in the fresh tmpfs (`fresh`, mounted at `opt`) and bound back in place; "ml" is ours.
int bind_back(int list, int real, int fresh, const char* opt, const char** step) {
  char real_dir[32] = "/proc/self/fd/";
  decimal(real, real_dir + ::strlen(real_dir));
  alignas(8) char buf[4096];
  char source[PATH_MAX], target[PATH_MAX], link[PATH_MAX];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, list, buf, sizeof(buf));
    if (n < 0) return *step = "listing /opt", errno;
    if (n == 0) return 0;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const LinuxDirent64*>(buf + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      if (!::strcmp(name, ".") || !::strcmp(name, "..") || !::strcmp(name, "ml")) continue;
      struct stat st;
      if (::fstatat(list, name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
      if (S_ISLNK(st.st_mode)) {
        const ssize_t len = ::readlinkat(list, name, link, sizeof(link) - 1);
        if (len < 0) continue;
        link[len] = '\0';
        if (::symlinkat(link, fresh, name) != 0) return *step = "recreating a link of /opt", errno;
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (::mkdirat(fresh, name, 0755) != 0) return *step = "recreating a folder of /opt", errno;
      } else {
        const int fd = ::openat(fresh, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return *step = "recreating a file of /opt", errno;
        ::close(fd);
      }
      if (!join(source, sizeof(source), real_dir, "/", name) ||
          !join(target, sizeof(target), opt, "/", name))
        return *step = "a path under /opt", ENAMETOOLONG;
      if (::mount(source, target, nullptr, MS_BIND | MS_REC, nullptr) != 0)
        return *step = "binding an entry of /opt back", errno;
    }
  }
}

// Mount (and, with `user`, user) namespaces of the child's own; a user namespace maps only
// the plan's uid and gid. Root without CAP_SYS_ADMIN (a container) may still be allowed a user
// namespace: EPERM for the mount namespace alone tries that.
int unshare_namespaces(const OptMlPlan& plan, const char** step) {
  bool user = plan.user_namespace;
  if (!user && ::unshare(CLONE_NEWNS) != 0) {
    if (errno != EPERM) return *step = "unshare(mount namespace)", errno;
    user = true;
  }
  if (!user) return 0;
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return *step = "unshare(user and mount namespaces)", errno;
  if (int err = write_file("/proc/self/setgroups", "deny")) return *step = "writing setgroups", err;
  if (int err = write_file("/proc/self/uid_map", plan.uid_map.c_str())) return *step = "writing uid_map", err;
  if (int err = write_file("/proc/self/gid_map", plan.gid_map.c_str())) return *step = "writing gid_map", err;
  return 0;
}

// Whether a child can enter `plan` here (once per process: the kernel and the process's
// privileges decide, not the job): "" when it can, else what failed. A child is forked, tries,
// and exits.
std::string probe(const OptMlPlan& plan) {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [&plan] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    const pid_t pid = ::fork();
    if (pid == 0) {
      const char* step = "";
      const int err = enter_opt_ml(plan, &step);
      if (err != 0) {
        ssize_t n = ::write(fds[1], &err, sizeof(err));
        n = ::write(fds[1], step, ::strlen(step));
        (void)n;
      }
      ::_exit(err == 0 ? 0 : 1);
    }
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      return;
    }
    char buf[256] = {0};
    ssize_t got = 0, n;
    while ((n = ::read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0) got += n;
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got >= static_cast<ssize_t>(sizeof(int))) {
      int err = 0;
      std::memcpy(&err, buf, sizeof(err));
      failure = std::string(buf + sizeof(int), got - sizeof(int)) + ": " + std::strerror(err);
    }
  });
  return failure;
}

}  // namespace

OptMlPlan opt_ml_plan(const Environment& env) {
  OptMlPlan plan;
  const std::string on = value(env, "HEFT_OPT_ML");
  if (on.empty() || on == "0") return plan;
  if (on != "1")
    throw InvalidArgument("HEFT_OPT_ML=" + on + ": expected 1 (the job's folders as /opt/ml) or 0");
  plan.enabled = true;
  plan.user_namespace = ::geteuid() != 0;
  plan.uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1";
  plan.gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1";
  const std::string job = folder(env, "HEFT_JOB_DIR");
  const std::string output = folder(env, "SM_OUTPUT_DIR");
  made(output + "/tensorboard");
  plan.binds = {{"model", folder(env, "SM_MODEL_DIR")},
                {"checkpoints", folder(env, "SM_CHECKPOINT_DIR")},
                {"local_checkpoints", made(job + "/local_checkpoints")},
                {"output", output},
                {"input", folder(env, "SM_INPUT_DIR")}};
  // Where the kernel or the process's privileges allow no mount namespace, the job runs
  // without /opt/ml (said once) rather than not at all.
  if (const std::string failure = probe(plan); !failure.empty()) {
    static std::once_flag said;
    std::call_once(said, [&failure] {
      std::cerr << "heft: the workers get no /opt/ml on this machine (" << failure
                << "); scripts must use the SM_* variables (docs/jobs.md#optml)" << std::endl;
    });
    plan.enabled = false;
  }
  return plan;
}

int enter_opt_ml(const OptMlPlan& plan, const char** step) {
  if (!plan.enabled) return 0;
  if (int err = unshare_namespaces(plan, step)) return err;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return *step = "making the mounts private", errno;
  const char* opt = plan.opt.c_str();
  const int list = ::open(opt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (list < 0) return *step = "opening /opt", errno;
  const int real = ::open(opt, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int err = real < 0 ? errno : 0;
  if (!err && ::mount("heft-opt", opt, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755") != 0)
    err = errno, *step = "mounting a tmpfs on /opt";
  else if (err)
    *step = "opening /opt";
  int fresh = -1;
  if (!err) {
    fresh = ::open(opt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fresh < 0) err = errno, *step = "opening the fresh /opt";
  }
  if (!err) err = bind_back(list, real, fresh, opt, step);
  if (!err && ::mkdirat(fresh, "ml", 0755) != 0) err = errno, *step = "making /opt/ml";
  char target[PATH_MAX];
  for (size_t i = 0; !err && i < plan.binds.size(); ++i) {
    if (!join(target, sizeof(target), opt, "/ml/", plan.binds[i].first.c_str())) {
      err = ENAMETOOLONG, *step = "a path under /opt/ml";
    } else if (::mkdir(target, 0755) != 0) {
      err = errno, *step = "making a folder of /opt/ml";
    } else if (::mount(plan.binds[i].second.c_str(), target, nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      err = errno, *step = "binding a job folder into /opt/ml";
    }
  }
  // The tmpfs itself read-only, as /opt is to a user: only the job's folders take writes.
  if (!err && ::mount(nullptr, opt, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                      nullptr) != 0)
    err = errno, *step = "making /opt read-only";
  for (int fd : {list, real, fresh})
    if (fd >= 0) ::close(fd);
  return err;
}

}  // namespace heft::job
