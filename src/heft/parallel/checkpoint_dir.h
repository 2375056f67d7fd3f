// Checkpoints: a training run's state saved atomically into a directory, the newest valid
// one loaded back. The library stores named byte blobs plus a small JSON object of counters
// (step, epoch, sampler position: whatever the caller needs). This header and its .cc are
// free of LibTorch (zlib and nlohmann_json only): the Python extension (heft.torch) links
// them too, so heft.torch.parallel.save_checkpoint writes this very format. torch_state.h
// turns a module, an optimizer and the RNG into blobs (checkpoint.h includes both).
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
//                                 next save of the same or a later step
//
// Multi-writer checkpoints (sharded state: every rank writes its own part of one checkpoint):
//   D/.tmp-ckpt-SSSSSSSSSSSS/part-KKKKK/   part K being written by its writer: its files,
//     part.json                   written last: {"part": K, "step": S, "files": [as above]}
//   then, once every part is in (the writers pass a barrier), one rank commits: writes
//   D/.tmp-ckpt-SSSSSSSSSSSS/manifest.json: {"format": "heft-checkpoint", "version": 2,
//   "step": S, "meta": {...}, "parts": N}, and renames the directory to D/ckpt-SSSSSSSSSSSS.
//   A writer that dies before the commit leaves no checkpoint of that step: the previous one
//   stays the newest. Cleanup after a save or commit of step S removes temporary
//   directories of steps <= S only, never a later step another writer may be writing.
// A save writes every blob and the manifest into the temporary directory, fsyncs each file
// and the directory, renames it to its final name (replacing a checkpoint of the same step)
// and fsyncs D. Then it removes all but the `keep` newest ckpt-* directories. A checkpoint is
// valid when its manifest parses, has the fields above, and every listed file exists with
// the listed size and crc32; load_latest() returns the valid one with the highest step,
// printing a warning line on `warnings` for each newer one it skips.
//
// save() and load_latest() are the single-writer form (the trainer's rank 0); save_part(),
// commit() and load_latest_part() the multi-writer one (save_collective() in
// parallel/checkpoint_collective.h runs it over a group). Not thread-safe. Errors writing
// throw heft::IoError naming the path. load_latest_any() reads either form with all its
// parts, for readers that reshard (the trainer's strategies). locate_latest_parts() checks
// a multi-writer checkpoint the same way but streams each file through the CRC and returns
// paths, so a reader of a model larger than its memory loads one file at a time (Python's
// load_checkpoint). Deliberately left out: async saving, remote storage.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace heft::parallel {

struct CheckpointData {
  int64_t step = 0;
  std::string meta_json = "{}";              // a JSON object, the caller's counters
  std::map<std::string, std::string> files;  // name (no '/', not manifest.json) -> bytes
};

// A checkpoint of either form: one part (single writer) or every part of a multi-writer one.
struct CheckpointSet {
  int64_t step = 0;
  std::string meta_json = "{}";
  std::vector<std::map<std::string, std::string>> parts;  // part K's files at index K
};

// A committed multi-writer checkpoint, verified but not read: part K's files as name -> path.
struct CheckpointPaths {
  int64_t step = 0;
  std::string meta_json = "{}";
  std::vector<std::map<std::string, std::string>> parts;
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

  // Multi-writer: writes part `part` of checkpoint `step` (not visible until committed).
  void save_part(int64_t step, int part, const std::map<std::string, std::string>& files) const;
  // Makes checkpoint `step` of `parts` parts visible atomically, with the caller's counters;
  // throws heft::IoError naming a missing part (nothing is committed then). Call once, after
  // every writer's save_part returned.
  void commit(int64_t step, int parts, const std::string& meta_json) const;
  // The newest committed multi-writer checkpoint whose part `part` is valid: its meta and
  // that part's files; skipped ones are warned about on `warnings`.
  std::optional<CheckpointData> load_latest_part(int part,
                                                 std::ostream& warnings = std::cerr) const;

  // The newest valid checkpoint of either form, with every part (a reader that reshards
  // needs all of them); skipped ones are warned about on `warnings`.
  std::optional<CheckpointSet> load_latest_any(std::ostream& warnings = std::cerr) const;

  // The newest committed multi-writer checkpoint (version 2) whose every part's part.json
  // parses and whose every file has its listed size and crc32 (checked 1 MiB at a time),
  // as paths; single-writer and invalid ones are skipped with a warning on `warnings`.
  std::optional<CheckpointPaths> locate_latest_parts(std::ostream& warnings = std::cerr) const;

  // The steps of the ckpt-* directories, newest first, valid or not (nothing is read).
  std::vector<int64_t> steps() const;

  const std::string& dir() const { return dir_; }

 private:
  void publish(const std::filesystem::path& tmp, int64_t step) const;
  void prune(int64_t step) const;
  std::filesystem::path parts_tmp(int64_t step) const;

  std::string dir_;
  int keep_;
};

// "part-00003".
std::string part_name(int part);

}  // namespace heft::parallel
