// Checkpoints: a training run's state saved atomically into a directory, the newest valid
// one loaded back. The library stores named byte blobs plus a small JSON object of counters
// (step, epoch, sampler position: whatever the caller needs); helpers below turn a module,
// an optimizer and torch's default CPU generator into blobs and back.
//
// On-disk format, in the checkpoint directory D (SM_CHECKPOINT_DIR):
//   D/ckpt-SSSSSSSSSSSS/          one checkpoint; S = its step, 12 decimal digits, zero-padded
//     <name>                      one file per blob, its bytes exactly as given (the trainer
//                                 writes model.pt, optimizer.pt: torch::serialize archives;
//                                 rng.pt: an archive holding the generator state as a uint8
//                                 tensor under the key "cpu")
//     manifest.json               written last, UTF-8 JSON object:
//       "format":  "heft-checkpoint"
//       "version": 1
//       "step":    integer, the same as SSSSSSSSSSSS
//       "meta":    object, the caller's counters, stored and returned as given
//       "files":   array of {"name": string, "size": integer bytes,
//                            "crc32": integer, zlib crc32 of the file's bytes}
//   D/.tmp-ckpt-SSSSSSSSSSSS-PID/ a checkpoint being written; never read, removed by the
//                                 next save
// A save writes every blob and the manifest into the temporary directory, fsyncs each file
// and the directory, renames it to its final name (replacing a checkpoint of the same step)
// and fsyncs D. Then it removes all but the `keep` newest ckpt-* directories. A checkpoint is
// valid when its manifest parses, has the fields above, and every listed file exists with
// the listed size and crc32; load_latest() returns the valid one with the highest step,
// printing a warning line on `warnings` for each newer one it skips.
//
// Not thread-safe; one writer per directory (the trainer's rank 0). Errors writing throw
// heft::IoError naming the path. Deliberately left out: sharded (per-rank) state, async
// saving, remote storage.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>

namespace heft::parallel {

struct CheckpointData {
  int64_t step = 0;
  std::string meta_json = "{}";              // a JSON object, the caller's counters
  std::map<std::string, std::string> files;  // name (no '/', not manifest.json) -> bytes
};

class CheckpointDirectory {
 public:
  // dir is created on the first save. keep >= 1; throws heft::InvalidArgument otherwise.
  CheckpointDirectory(std::string dir, int keep);

  // Saves atomically as described above; throws heft::IoError (the previous checkpoints
  // stay valid) or heft::InvalidArgument for a bad file name or meta_json.
  void save(const CheckpointData& data) const;

  // The newest valid checkpoint, or nullopt when there is none (or no directory). Never
  // throws for a corrupt checkpoint: it is skipped with a warning on `warnings`.
  std::optional<CheckpointData> load_latest(std::ostream& warnings = std::cerr) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_;
};

// Blobs. The load functions throw what torch::serialize throws (c10::Error) on bad bytes.
std::string module_to_bytes(const torch::nn::Module& module);
void module_from_bytes(torch::nn::Module& module, const std::string& bytes);
std::string optimizer_to_bytes(const torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes);
// torch's default CPU generator (torch::manual_seed, dropout, randn, ...).
std::string rng_to_bytes();
void rng_from_bytes(const std::string& bytes);

}  // namespace heft::parallel
