#include "heft/comm/trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "heft/error.h"

namespace heft::comm {

double trace_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string CollectiveTrace::dir_from_env() {
  const char* d = std::getenv("HEFT_TRACE_DIR");
  return d ? d : "";
}

std::unique_ptr<CollectiveTrace> CollectiveTrace::open(const std::string& dir,
                                                       const std::string& group, int rank,
                                                       int size, int world_rank) {
  if (dir.empty()) return nullptr;
  std::string name = group;
  for (char& c : name)
    if (c == '/') c = '+';
  const std::string path = dir + "/rank-" + std::to_string(world_rank) + "." + name + ".trace";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw IoError("collective trace: cannot create " + path + ": " + std::strerror(errno));
  void* mem = MAP_FAILED;
  if (::ftruncate(fd, sizeof(TraceFile)) == 0)
    mem = ::mmap(nullptr, sizeof(TraceFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (mem == MAP_FAILED)
    throw IoError("collective trace: cannot map " + path + ": " + std::strerror(err));
  auto* file = static_cast<TraceFile*>(mem);
  std::memset(file, 0, sizeof(TraceFile));
  file->rank = rank;
  file->size = size;
  file->world_rank = world_rank;
  file->pid = static_cast<int32_t>(::getpid());
  std::strncpy(file->group, group.c_str(), sizeof(file->group) - 1);
  std::memcpy(file->magic, kTraceMagic, sizeof(kTraceMagic));  // last: the file is complete
  return std::unique_ptr<CollectiveTrace>(new CollectiveTrace(path, file));
}

CollectiveTrace::~CollectiveTrace() { ::munmap(file_, sizeof(TraceFile)); }

TraceEntry* CollectiveTrace::entry(uint64_t seq) {
  return &file_->entries[(seq - 1) % kTraceEntries];
}

uint64_t CollectiveTrace::queued(const std::string& op) {
  const uint64_t seq = ++file_->issued;
  TraceEntry* e = entry(seq);
  e->state = static_cast<int32_t>(TraceState::kEmpty);
  e->seq = seq;
  e->queued_at = trace_clock();
  e->started_at = 0;
  e->ended_at = 0;
  e->peer = -1;
  const size_t n = std::min(op.size(), sizeof(e->op) - 1);
  std::memcpy(e->op, op.data(), n);
  e->op[n] = '\0';
  e->state = static_cast<int32_t>(TraceState::kQueued);
  return seq;
}

void CollectiveTrace::started(uint64_t seq) {
  TraceEntry* e = entry(seq);
  if (e->seq != seq) return;
  e->started_at = trace_clock();
  e->state = static_cast<int32_t>(TraceState::kRunning);
}

void CollectiveTrace::ended(uint64_t seq, bool ok, int peer) {
  TraceEntry* e = entry(seq);
  if (e->seq != seq) return;
  e->ended_at = trace_clock();
  e->peer = peer;
  e->state = static_cast<int32_t>(ok ? TraceState::kDone : TraceState::kFailed);
}

}  // namespace heft::comm
