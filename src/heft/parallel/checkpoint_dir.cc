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

// Reads and verifies one checkpoint; the reason in `why` when it is not valid.
std::optional<CheckpointData> read_checkpoint(const fs::path& path, int64_t step,
                                              std::string& why) {
  std::string text;
  if (!read_file(path / kManifest, text)) {
    why = "no readable manifest.json";
    return std::nullopt;
  }
  const json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != "heft-checkpoint" ||
      !m.contains("step") || !m["step"].is_number_integer() || !m.contains("files") ||
      !m["files"].is_array() || !m.contains("meta") || !m["meta"].is_object()) {
    why = "manifest.json is not a heft-checkpoint manifest";
    return std::nullopt;
  }
  if (m["step"].get<int64_t>() != step) {
    why = "manifest.json names step " + std::to_string(m["step"].get<int64_t>());
    return std::nullopt;
  }
  CheckpointData data;
  data.step = step;
  data.meta_json = m["meta"].dump();
  for (const json& f : m["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("size") ||
        !f.contains("crc32")) {
      why = "manifest.json has a malformed files entry";
      return std::nullopt;
    }
    const std::string name = f["name"].get<std::string>();
    std::string bytes;
    if (name.find('/') != std::string::npos || !read_file(path / name, bytes)) {
      why = name + " is missing";
      return std::nullopt;
    }
    if (static_cast<int64_t>(bytes.size()) != f["size"].get<int64_t>() ||
        crc_of(bytes) != f["crc32"].get<uint32_t>()) {
      why = name + " does not match its size or crc32 in manifest.json";
      return std::nullopt;
    }
    data.files.emplace(name, std::move(bytes));
  }
  return data;
}

// The top manifest of committed multi-writer checkpoint `path` (version 2, step `step`).
std::optional<json> committed_manifest(const fs::path& path, int64_t step, std::string& why) {
  std::string text;
  if (!read_file(path / kManifest, text)) {
    why = "no readable manifest.json";
    return std::nullopt;
  }
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != "heft-checkpoint" ||
      m.value("version", 0) != 2 || !m.contains("parts") || !m["parts"].is_number_integer() ||
      !m.contains("meta") || !m["meta"].is_object() || m.value("step", int64_t{-1}) != step) {
    why = "manifest.json is not a committed multi-writer checkpoint of step " + std::to_string(step);
    return std::nullopt;
  }
  return m;
}

// Part `part`'s part.json file list (each entry an object with a plain "name").
std::optional<json> part_files(const fs::path& path, int part, std::string& why) {
  std::string text;
  const fs::path dir = path / part_name(part);
  const json pm = json::parse(read_file(dir / kPartManifest, text) ? text : "", nullptr, false);
  bool ok = !pm.is_discarded() && pm.is_object() && pm.contains("files") && pm["files"].is_array();
  for (size_t i = 0; ok && i < pm["files"].size(); ++i) {
    const json& f = pm["files"][i];
    const std::string name = f.is_object() ? f.value("name", "") : "";
    ok = !name.empty() && name.find('/') == std::string::npos;
  }
  if (!ok) {
    why = part_name(part) + "/part.json is missing or malformed";
    return std::nullopt;
  }
  return pm["files"];
}

// Whether the file at `path` has `size` bytes and crc32 `crc`, read 1 MiB at a time.
bool file_matches(const fs::path& path, int64_t size, uint32_t crc) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
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
  return !in.bad() && n == size && static_cast<uint32_t>(c) == crc;
}

// A committed multi-writer checkpoint's part `part`: the top manifest (version 2) and the
// part's own manifest and files, each checked.
std::optional<CheckpointData> read_part(const fs::path& path, int64_t step, int part,
                                        std::string& why) {
  const auto m = committed_manifest(path, step, why);
  if (!m) return std::nullopt;
  if (part >= (*m)["parts"].get<int>()) {
    why = "it has " + std::to_string((*m)["parts"].get<int>()) + " parts, not part " + std::to_string(part);
    return std::nullopt;
  }
  const auto files = part_files(path, part, why);
  if (!files) return std::nullopt;
  CheckpointData data;
  data.step = step;
  data.meta_json = (*m)["meta"].dump();
  const fs::path dir = path / part_name(part);
  for (const json& f : *files) {
    const std::string name = f["name"].get<std::string>();
    std::string bytes;
    if (!read_file(dir / name, bytes) ||
        static_cast<int64_t>(bytes.size()) != f.value("size", int64_t{-1}) ||
        crc_of(bytes) != f.value("crc32", uint32_t{0})) {
      why = part_name(part) + "/" + name + " is missing or does not match its size or crc32";
      return std::nullopt;
    }
    data.files.emplace(name, std::move(bytes));
  }
  return data;
}

// Like read_part for every part, but streams each file through the check and keeps paths.
std::optional<CheckpointPaths> locate_parts(const fs::path& path, int64_t step, std::string& why) {
  const auto m = committed_manifest(path, step, why);
  if (!m) return std::nullopt;
  CheckpointPaths found;
  found.step = step;
  found.meta_json = (*m)["meta"].dump();
  for (int part = 0; part < (*m)["parts"].get<int>(); ++part) {
    const auto files = part_files(path, part, why);
    if (!files) return std::nullopt;
    const fs::path dir = path / part_name(part);
    auto& out = found.parts.emplace_back();
    for (const json& f : *files) {
      const std::string name = f["name"].get<std::string>();
      if (!file_matches(dir / name, f.value("size", int64_t{-1}), f.value("crc32", uint32_t{0}))) {
        why = part_name(part) + "/" + name + " is missing or does not match its size or crc32";
        return std::nullopt;
      }
      out.emplace(name, (dir / name).string());
    }
  }
  return found;
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

void CheckpointDirectory::save(const CheckpointData& data) const {
  const json meta = json::parse(data.meta_json, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    throw InvalidArgument("checkpoint meta: expected a JSON object, found " + data.meta_json);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw IoError("cannot create checkpoint directory " + dir_ + ": " + ec.message());
  const std::string name = step_name(data.step);
  const fs::path tmp = fs::path(dir_) / (kTmpPrefix + name + "-" + std::to_string(::getpid()));
  const fs::path final_path = fs::path(dir_) / (kPrefix + name);
  fs::create_directories(tmp, ec);
  if (ec) throw IoError("cannot create " + tmp.string() + ": " + ec.message());
  json files = json::array();
  for (const auto& [file, bytes] : data.files) {
    if (file.empty() || file.find('/') != std::string::npos || file == kManifest || file[0] == '.')
      throw InvalidArgument("checkpoint file name: expected a plain name, found '" + file + "'");
    write_file((tmp / file).string(), bytes);
    files.push_back({{"name", file}, {"size", bytes.size()}, {"crc32", crc_of(bytes)}});
  }
  const json manifest = {{"format", "heft-checkpoint"},
                         {"version", 1},
                         {"step", data.step},
                         {"meta", meta},
                         {"files", files}};
  write_file((tmp / kManifest).string(), manifest.dump(2) + "\n");
  fsync_path(tmp.string(), /*directory=*/true);
  fs::remove_all(final_path, ec);  // a checkpoint of the same step: older ones stay valid
  fs::rename(tmp, final_path, ec);
  if (ec) throw IoError("cannot rename " + tmp.string() + " to " + final_path.string() + ": " +
                        ec.message());
  fsync_path(dir_, /*directory=*/true);
  prune(data.step);
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
  json list = json::array();
  for (const auto& [file, bytes] : files) {
    if (file.empty() || file.find('/') != std::string::npos || file == kPartManifest ||
        file[0] == '.')
      throw InvalidArgument("checkpoint file name: expected a plain name, found '" + file + "'");
    write_file((dir / file).string(), bytes);
    list.push_back({{"name", file}, {"size", bytes.size()}, {"crc32", crc_of(bytes)}});
  }
  write_file((dir / kPartManifest).string(),
             json{{"part", part}, {"step", step}, {"files", list}}.dump(2) + "\n");
  fsync_path(dir.string(), /*directory=*/true);
  fsync_path(parts_tmp(step).string(), /*directory=*/true);
}

void CheckpointDirectory::commit(int64_t step, int parts, const std::string& meta_json) const {
  const json meta = json::parse(meta_json, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object())
    throw InvalidArgument("checkpoint meta: expected a JSON object, found " + meta_json);
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

std::optional<CheckpointData> CheckpointDirectory::load_latest_part(
    int part, std::ostream& warnings) const {
  for (const auto& [step, path] : checkpoints(dir_)) {
    std::string why;
    if (auto data = read_part(path, step, part, why)) return data;
    warnings << "heft checkpoint: warning: skipping " << path.string() << " for part " << part
             << ": " << why << std::endl;
  }
  return std::nullopt;
}

std::optional<CheckpointSet> CheckpointDirectory::load_latest_any(std::ostream& warnings) const {
  for (const auto& [step, path] : checkpoints(dir_)) {
    std::string why, text;
    int parts = 0;
    if (read_file(path / kManifest, text)) {
      const json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (m.is_object() && m.value("version", 0) == 2 && m.contains("parts") &&
          m["parts"].is_number_integer())
        parts = m["parts"].get<int>();
    }
    CheckpointSet set;
    set.step = step;
    bool ok = true;
    if (parts == 0) {
      auto data = read_checkpoint(path, step, why);
      ok = data.has_value();
      if (ok) {
        set.meta_json = data->meta_json;
        set.parts.push_back(std::move(data->files));
      }
    } else {
      for (int p = 0; p < parts && ok; ++p) {
        auto data = read_part(path, step, p, why);
        ok = data.has_value();
        if (ok) {
          set.meta_json = data->meta_json;
          set.parts.push_back(std::move(data->files));
        }
      }
    }
    if (ok) return set;
    warnings << "heft checkpoint: warning: skipping " << path.string() << ": " << why
             << std::endl;
  }
  return std::nullopt;
}

std::optional<CheckpointData> CheckpointDirectory::load_latest(std::ostream& warnings) const {
  for (const auto& [step, path] : checkpoints(dir_)) {
    std::string why;
    if (auto data = read_checkpoint(path, step, why)) return data;
    warnings << "heft checkpoint: warning: skipping " << path.string() << ": " << why
             << std::endl;
  }
  return std::nullopt;
}

std::optional<CheckpointPaths> CheckpointDirectory::locate_latest_parts(
    std::ostream& warnings) const {
  for (const auto& [step, path] : checkpoints(dir_)) {
    std::string why;
    if (auto found = locate_parts(path, step, why)) return found;
    warnings << "heft checkpoint: warning: skipping " << path.string() << ": " << why
             << std::endl;
  }
  return std::nullopt;
}

std::vector<int64_t> CheckpointDirectory::steps() const {
  std::vector<int64_t> out;
  for (const auto& [step, path] : checkpoints(dir_)) out.push_back(step);
  return out;
}

}  // namespace heft::parallel
