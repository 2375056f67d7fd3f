#include "heft/parallel/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "heft/error.h"

namespace heft::parallel {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kTmpPrefix = ".tmp-ckpt-";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kPartManifest = "part.json";

uint32_t crc_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {  // crc32 takes a uInt length
    const size_t n = std::min<size_t>(bytes.size() - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

std::string errno_text() { return errno_string(errno); }  // thread-safe, unlike strerror

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw IoError("cannot open " + path + " to fsync: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw IoError("fsync " + path + ": " + why);
}

void write_file(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw IoError("cannot create " + path + ": " + errno_text());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      throw IoError("cannot write " + path + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw IoError("fsync " + path + ": " + why);
}

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return !in.bad();
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012lld", static_cast<long long>(step));
  return buf;
}

// The ckpt-* directories of `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, fs::path>> checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> v;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || name.size() != 5 + 12) continue;
    const std::string digits = name.substr(5);
    if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    v.emplace_back(std::stoll(digits), it->path());
  }
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return v;
}

// A files entry of a manifest or part.json: {"name": a plain name, "size": bytes, "crc32"}.
struct ListedFile {
  std::string name;
  int64_t size = 0;
  uint32_t crc = 0;
};

// The entries of `list`, or nullopt when one is malformed.
std::optional<std::vector<ListedFile>> listed_files(const json& list) {
  std::vector<ListedFile> out;
  for (const json& f : list) {
    const bool ok = f.is_object() && f.contains("name") && f["name"].is_string() &&
                    f.contains("size") && f["size"].is_number_integer() && f.contains("crc32") &&
                    f["crc32"].is_number_unsigned();
    const std::string name = ok ? f["name"].get<std::string>() : "";
    if (name.empty() || name.find('/') != std::string::npos) return std::nullopt;
    out.push_back({name, f["size"].get<int64_t>(), f["crc32"].get<uint32_t>()});
  }
  return out;
}

enum class FileCheck { kOk, kMissing, kMismatch };

// Whether the file at `path` is there with f's size and crc32. With `bytes`, reads it whole
// into *bytes; without, streams it through the CRC 1 MiB at a time.
FileCheck check_file(const fs::path& path, const ListedFile& f, std::string* bytes) {
  if (bytes) {
    if (!read_file(path, *bytes)) return FileCheck::kMissing;
    return static_cast<int64_t>(bytes->size()) == f.size && crc_of(*bytes) == f.crc
               ? FileCheck::kOk : FileCheck::kMismatch;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return FileCheck::kMissing;
  std::vector<char> buf(1 << 20);
  uLong c = crc32(0L, Z_NULL, 0);
  int64_t n = 0;
  for (;;) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    c = crc32(c, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    n += got;
  }
  return !in.bad() && n == f.size && static_cast<uint32_t>(c) == f.crc ? FileCheck::kOk
                                                                       : FileCheck::kMismatch;
}

// A checkpoint's manifest.json, checked: single-writer (version 1, its files) or committed
// multi-writer (version 2, its part count).
struct Manifest {
  int version = 1;
  std::string meta_json;
  std::vector<ListedFile> files;  // version 1
  int parts = 0;                  // version 2
};

// The manifest of checkpoint `path` (the directory of step `step`) in form `version` (1 or
// 2; 0: whichever it is); the reason in `why` when it is not a valid one.
std::optional<Manifest> read_manifest(const fs::path& path, int64_t step, int version,
                                      std::string& why) {
  std::string text;
  if (!read_file(path / kManifest, text)) {
    why = "no readable manifest.json";
    return std::nullopt;
  }
  const json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool header = m.is_object() && m.contains("format") && m["format"] == "heft-checkpoint" &&
                      m.contains("step") && m["step"].is_number_integer() && m.contains("meta") &&
                      m["meta"].is_object();
  const bool multi = header && m.contains("version") && m["version"] == 2 &&
                     m.contains("parts") && m["parts"].is_number_integer() && m["parts"] >= 1;
  Manifest out;
  out.version = version != 0 ? version : multi ? 2 : 1;
  if (out.version == 2) {
    if (!multi || m["step"].get<int64_t>() != step) {
      why = "manifest.json is not a committed multi-writer checkpoint of step " + std::to_string(step);
      return std::nullopt;
    }
    out.parts = m["parts"].get<int>();
  } else {
    if (!header || !m.contains("files") || !m["files"].is_array()) {
      why = "manifest.json is not a heft-checkpoint manifest";
      return std::nullopt;
    }
    if (m["step"].get<int64_t>() != step) {
      why = "manifest.json names step " + std::to_string(m["step"].get<int64_t>());
      return std::nullopt;
    }
    auto files = listed_files(m["files"]);
    if (!files) {
      why = "manifest.json has a malformed files entry";
      return std::nullopt;
    }
    out.files = std::move(*files);
  }
  out.meta_json = m["meta"].dump();
  return out;
}

// The files of single-writer checkpoint `path` as its manifest `m` lists them, read and checked.
bool read_files(const fs::path& path, const Manifest& m, std::map<std::string, std::string>& out,
                std::string& why) {
  for (const ListedFile& f : m.files) {
    std::string bytes;
    switch (check_file(path / f.name, f, &bytes)) {
      case FileCheck::kMissing: why = f.name + " is missing"; return false;
      case FileCheck::kMismatch:
        why = f.name + " does not match its size or crc32 in manifest.json";
        return false;
      case FileCheck::kOk: out.emplace(f.name, std::move(bytes)); break;
    }
  }
  return true;
}

// Part `part` of committed checkpoint `path`: the files its part.json lists, each checked,
// into `out` as bytes (read) or as paths.
bool part_files(const fs::path& path, int part, bool read, std::map<std::string, std::string>& out,
                std::string& why) {
  const fs::path dir = path / part_name(part);
  std::string text;
  const json pm = json::parse(read_file(dir / kPartManifest, text) ? text : "", nullptr, false);
  const auto files = pm.is_object() && pm.contains("files") && pm["files"].is_array()
                         ? listed_files(pm["files"]) : std::nullopt;
  if (!files) {
    why = part_name(part) + "/part.json is missing or malformed";
    return false;
  }
  for (const ListedFile& f : *files) {
    std::string bytes;
    if (check_file(dir / f.name, f, read ? &bytes : nullptr) != FileCheck::kOk) {
      why = part_name(part) + "/" + f.name + " is missing or does not match its size or crc32";
      return false;
    }
    out.emplace(f.name, read ? std::move(bytes) : (dir / f.name).string());
  }
  return true;
}

// Every part of committed checkpoint `path` (manifest `m`), as part_files gives them.
bool all_parts(const fs::path& path, const Manifest& m, bool read,
               std::vector<std::map<std::string, std::string>>& parts, std::string& why) {
  for (int part = 0; part < m.parts; ++part)
    if (!part_files(path, part, read, parts.emplace_back(), why)) return false;
  return true;
}

// The readers of one checkpoint, each giving the reason in `why` when it is not valid.
// A single-writer checkpoint.
std::optional<CheckpointData> read_checkpoint(const fs::path& path, int64_t step, std::string& why) {
  const auto m = read_manifest(path, step, 1, why);
  CheckpointData data;
  data.step = step;
  if (!m || !read_files(path, *m, data.files, why)) return std::nullopt;
  data.meta_json = m->meta_json;
  return data;
}

// Part `part` of a committed multi-writer checkpoint.
std::optional<CheckpointData> read_part(const fs::path& path, int64_t step, int part,
                                        std::string& why) {
  const auto m = read_manifest(path, step, 2, why);
  if (!m) return std::nullopt;
  if (part >= m->parts) {
    why = "it has " + std::to_string(m->parts) + " parts, not part " + std::to_string(part);
    return std::nullopt;
  }
  CheckpointData data;
  data.step = step;
  data.meta_json = m->meta_json;
  if (!part_files(path, part, /*read=*/true, data.files, why)) return std::nullopt;
  return data;
}

// Either form, with every part.
std::optional<CheckpointSet> read_any(const fs::path& path, int64_t step, std::string& why) {
  const auto m = read_manifest(path, step, 0, why);
  if (!m) return std::nullopt;
  CheckpointSet set;
  set.step = step;
  set.meta_json = m->meta_json;
  const bool ok = m->version == 1 ? read_files(path, *m, set.parts.emplace_back(), why)
                                  : all_parts(path, *m, /*read=*/true, set.parts, why);
  if (!ok) return std::nullopt;
  return set;
}

// Every part of a committed multi-writer checkpoint, streamed through the check, as paths.
std::optional<CheckpointPaths> locate_parts(const fs::path& path, int64_t step, std::string& why) {
  const auto m = read_manifest(path, step, 2, why);
  if (!m) return std::nullopt;
  CheckpointPaths found;
  found.step = step;
  found.meta_json = m->meta_json;
  if (!all_parts(path, *m, /*read=*/false, found.parts, why)) return std::nullopt;
  return found;
}

// The newest checkpoint of `dir` that `read` accepts (read(path, step, why)); each newer one
// is skipped with a warning naming it, `what` ("" or " for part K") and the reason.
template <typename Read>
auto newest(const std::string& dir, const std::string& what, std::ostream& warnings, Read read)
    -> decltype(read(fs::path(), int64_t{0}, std::declval<std::string&>())) {
  for (const auto& [step, path] : checkpoints(dir)) {
    std::string why;
    if (auto found = read(path, step, why)) return found;
    warnings << "heft checkpoint: warning: skipping " << path.string() << what << ": " << why
             << std::endl;
  }
  return std::nullopt;
}

}  // namespace

std::string part_name(int part) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "part-%05d", part);
  return buf;
}

CheckpointDirectory::CheckpointDirectory(std::string dir, int keep)
    : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1)
    throw InvalidArgument("checkpoint keep: expected at least 1, found " + std::to_string(keep));
  if (dir_.empty()) throw InvalidArgument("checkpoint directory: expected a path, found ''");
}

namespace {

// The caller's counters: a JSON object (heft::InvalidArgument otherwise).
json meta_object(const std::string& meta_json) {
  json meta = json::parse(meta_json, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    throw InvalidArgument("checkpoint meta: expected a JSON object, found " + meta_json);
  return meta;
}

// Writes (and fsyncs) each file into `dir`; returns their files entries. A name that is not
// plain (empty, a '/', a leading '.', or the manifest's own `manifest`) is refused.
json write_files(const fs::path& dir, const std::map<std::string, std::string>& files,
                 const char* manifest) {
  json list = json::array();
  for (const auto& [file, bytes] : files) {
    if (file.empty() || file.find('/') != std::string::npos || file == manifest || file[0] == '.')
      throw InvalidArgument("checkpoint file name: expected a plain name, found '" + file + "'");
    write_file((dir / file).string(), bytes);
    list.push_back({{"name", file}, {"size", bytes.size()}, {"crc32", crc_of(bytes)}});
  }
  return list;
}

}  // namespace

void CheckpointDirectory::save(const CheckpointData& data) const {
  const json meta = meta_object(data.meta_json);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw IoError("cannot create checkpoint directory " + dir_ + ": " + ec.message());
  const fs::path tmp =
      fs::path(dir_) / (kTmpPrefix + step_name(data.step) + "-" + std::to_string(::getpid()));
  fs::create_directories(tmp, ec);
  if (ec) throw IoError("cannot create " + tmp.string() + ": " + ec.message());
  const json files = write_files(tmp, data.files, kManifest);
  const json manifest = {{"format", "heft-checkpoint"},
                         {"version", 1},
                         {"step", data.step},
                         {"meta", meta},
                         {"files", files}};
  write_file((tmp / kManifest).string(), manifest.dump(2) + "\n");
  publish(tmp, data.step);
}

// `tmp`, complete with its manifest, becomes checkpoint `step`: fsynced, renamed over a
// checkpoint of the same step (older ones stay valid), D fsynced, then pruned.
void CheckpointDirectory::publish(const fs::path& tmp, int64_t step) const {
  fsync_path(tmp.string(), /*directory=*/true);
  const fs::path final_path = fs::path(dir_) / (kPrefix + step_name(step));
  std::error_code ec;
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) throw IoError("cannot rename " + tmp.string() + " to " + final_path.string() + ": " +
                        ec.message());
  fsync_path(dir_, /*directory=*/true);
  prune(step);
}

// After `step` was committed: keep the `keep_` newest checkpoints, and remove temporary
// directories of steps up to `step` (saves that died: a newer checkpoint exists, so nobody
// still writes them). Those of later steps may be other writers' work in progress: kept.
void CheckpointDirectory::prune(int64_t step) const {
  const auto all = checkpoints(dir_);
  for (size_t i = static_cast<size_t>(keep_); i < all.size(); ++i) {
    std::error_code ignored;
    fs::remove_all(all[i].second, ignored);
  }
  std::error_code ec;
  const size_t prefix = std::string(kTmpPrefix).size();
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kTmpPrefix, 0) != 0 || name.size() < prefix + 12) continue;
    const std::string digits = name.substr(prefix, 12);
    if (!std::all_of(digits.begin(), digits.end(), ::isdigit) || std::stoll(digits) > step)
      continue;
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
}

fs::path CheckpointDirectory::parts_tmp(int64_t step) const {
  return fs::path(dir_) / (kTmpPrefix + step_name(step));
}

void CheckpointDirectory::save_part(int64_t step, int part,
                                    const std::map<std::string, std::string>& files) const {
  if (part < 0) throw InvalidArgument("checkpoint part: expected >= 0, found " + std::to_string(part));
  const fs::path dir = parts_tmp(step) / part_name(part);
  std::error_code ec;
  fs::remove_all(dir, ec);  // this writer's own earlier attempt at this step
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create " + dir.string() + ": " + ec.message());
  const json list = write_files(dir, files, kPartManifest);
  write_file((dir / kPartManifest).string(),
             json{{"part", part}, {"step", step}, {"files", list}}.dump(2) + "\n");
  fsync_path(dir.string(), /*directory=*/true);
  fsync_path(parts_tmp(step).string(), /*directory=*/true);
}

void CheckpointDirectory::commit(int64_t step, int parts, const std::string& meta_json) const {
  const json meta = meta_object(meta_json);
  if (parts < 1) throw InvalidArgument("checkpoint parts: expected >= 1, found " + std::to_string(parts));
  const fs::path tmp = parts_tmp(step);
  for (int k = 0; k < parts; ++k) {
    std::string text;
    if (!read_file(tmp / part_name(k) / kPartManifest, text))
      throw IoError("checkpoint step " + std::to_string(step) + ": " +
                    (tmp / part_name(k)).string() + " is missing: not committed (the previous "
                    "checkpoint stays the newest)");
  }
  write_file((tmp / kManifest).string(), json{{"format", "heft-checkpoint"},
                                              {"version", 2},
                                              {"step", step},
                                              {"meta", meta},
                                              {"parts", parts}}
                                             .dump(2) + "\n");
  publish(tmp, step);
}

std::optional<CheckpointData> CheckpointDirectory::load_latest(std::ostream& warnings) const {
  return newest(dir_, "", warnings, read_checkpoint);
}

std::optional<CheckpointData> CheckpointDirectory::load_latest_part(
    int part, std::ostream& warnings) const {
  return newest(dir_, " for part " + std::to_string(part), warnings,
                [part](const fs::path& path, int64_t step, std::string& why) {
                  return read_part(path, step, part, why);
                });
}

std::optional<CheckpointSet> CheckpointDirectory::load_latest_any(std::ostream& warnings) const {
  return newest(dir_, "", warnings, read_any);
}

std::optional<CheckpointPaths> CheckpointDirectory::locate_latest_parts(
    std::ostream& warnings) const {
  return newest(dir_, "", warnings, locate_parts);
}

std::vector<int64_t> CheckpointDirectory::steps() const {
  std::vector<int64_t> out;
  for (const auto& [step, path] : checkpoints(dir_)) out.push_back(step);
  return out;
}

}  // namespace heft::parallel
