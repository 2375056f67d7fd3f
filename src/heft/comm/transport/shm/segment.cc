#include "heft/comm/transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "heft/error.h"

namespace heft::comm::shm {

namespace {
// MAP_POPULATE: the pages and this process's page tables exist from the start, so the
// first collectives do not pay a fault per page (nor does the single-copy measurement).
uint8_t* map(int fd, size_t bytes, const std::string& name) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    throw IoError("shared memory " + name + ": mmap: " + errno_string(e));
  }
  close(fd);
  return static_cast<uint8_t*>(p);
}
}  // namespace

Segment Segment::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError("shared memory " + name + ": shm_open: " + errno_string(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw IoError("shared memory " + name + ": ftruncate to " + std::to_string(bytes) +
                  " bytes: " + errno_string(e) + " (is /dev/shm large enough?)");
  }
  Segment s;
  s.name_ = name;
  s.owner_ = true;
  s.linked_ = true;
  s.size_ = bytes;
  try {
    s.data_ = map(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
  return s;
}

Segment Segment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError("shared memory " + name + ": shm_open: " + errno_string(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    throw IoError("shared memory " + name + ": fstat: " + errno_string(err));
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    throw IoError("shared memory " + name + ": belongs to uid " + std::to_string(st.st_uid) +
                  " with mode " + mode + ", not to this job's user alone (uid " +
                  std::to_string(geteuid()) + ", mode 600): refused (see docs/security.md)");
  }
  if (static_cast<size_t>(st.st_size) < bytes) {
    close(fd);
    throw IoError("shared memory " + name + ": smaller than the expected " +
                  std::to_string(bytes) + " bytes");
  }
  Segment s;
  s.name_ = name;
  s.size_ = bytes;
  s.data_ = map(fd, bytes, name);
  return s;
}

Segment::~Segment() { release(); }

Segment::Segment(Segment&& o) noexcept { *this = std::move(o); }

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = o.data_;
    size_ = o.size_;
    owner_ = o.owner_;
    linked_ = o.linked_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.owner_ = o.linked_ = false;
  }
  return *this;
}

void Segment::unlink() {
  if (owner_ && linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

void Segment::release() {
  unlink();
  if (data_) munmap(data_, size_);
  data_ = nullptr;
}

}  // namespace heft::comm::shm
