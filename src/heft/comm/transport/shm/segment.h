// A POSIX shared-memory segment (shm_open + mmap), owned or opened.
// The owner creates it; peers open it by name; once every rank has mapped every segment the
// names are unlinked (unlink()), so the memory lives exactly as long as the processes that
// map it and nothing is left in /dev/shm after a crash. An owned segment still linked at
// destruction (set-up failed) is unlinked then.
// Deliberately left out: resizing, huge pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace heft::comm::shm {

class Segment {
 public:
  Segment() = default;
  // Creates `name` (fails with heft::IoError if it exists) of `bytes`, zero-filled.
  static Segment create(const std::string& name, size_t bytes);
  // Maps an existing segment; throws heft::IoError naming it when missing, smaller, not this
  // process's user's, or open to other users (a segment another local user planted).
  static Segment open(const std::string& name, size_t bytes);
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name (the mapping stays valid). Idempotent.
  void unlink();

 private:
  void release();
  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
  bool linked_ = false;
};

}  // namespace heft::comm::shm
