#include "heft/parallel/mesh.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "heft/comm/trace.h"
#include "heft/error.h"

namespace heft::parallel {

namespace {

// s as a JSON string literal.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Writes the labels where the collective traces go (a no-op when tracing is off).
void write_group_labels(const std::string& json, int rank) {
  const std::string dir = comm::CollectiveTrace::dir_from_env();
  if (dir.empty()) return;
  const std::string path = dir + "/rank-" + std::to_string(rank) + ".groups.json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << json;
    if (!out.flush()) throw IoError("the mesh's group labels: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw IoError("the mesh's group labels: cannot rename " + tmp + " to " + path);
}

}  // namespace

DeviceMesh::DeviceMesh(comm::Communicator& world, MeshShape shape)
    : layout_(world.size(), std::move(shape)), rank_(world.rank()) {
  // One split per dimension, in the same order on every rank; the color is the group's
  // smallest rank (unique per group), the key the rank's index along the dimension.
  for (Dim d : {Dim::kData, Dim::kPipeline, Dim::kTensor, Dim::kReplicate, Dim::kShard}) {
    const std::vector<int> members = layout_.group(rank_, d);
    if (static_cast<int>(members.size()) == world.size()) {
      // The whole world, in world order (a group's members ascend by their index along
      // d, and here that index is the world rank): no second communicator, no second set
      // of shared-memory segments. Every rank takes this branch for the same d.
      groups_[static_cast<int>(d)] = std::make_unique<ProcessGroup>(world);
      continue;
    }
    const int color = *std::min_element(members.begin(), members.end());
    auto& slot = comms_[static_cast<int>(d)];
    slot = world.split(color, layout_.coordinate(rank_, d));
    groups_[static_cast<int>(d)] = std::make_unique<ProcessGroup>(*slot);
  }
  for (Dim d : {Dim::kData, Dim::kPipeline, Dim::kTensor, Dim::kReplicate, Dim::kShard}) {
    const auto& slot = comms_[static_cast<int>(d)];
    names_[static_cast<int>(d)] = slot ? slot->group() : world.group();
  }
  write_group_labels(group_labels_json(layout_, rank_, names_), rank_);
}

std::string group_labels_json(const MeshLayout& layout, int rank,
                              const std::array<std::string, 5>& names) {
  std::string out = "{\"world_rank\": " + std::to_string(rank) + ", \"groups\": [";
  bool first = true;
  for (Dim d : {Dim::kData, Dim::kPipeline, Dim::kTensor, Dim::kReplicate, Dim::kShard}) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += "{\"group\": " + quoted(names[static_cast<int>(d)]) + ", \"dimension\": " +
           quoted(name(d)) + ", \"ranks\": [";
    const std::vector<int> members = layout.group(rank, d);
    for (size_t i = 0; i < members.size(); ++i)
      out += (i ? ", " : "") + std::to_string(members[i]);
    out += "]}";
  }
  return out + "\n]}\n";
}

DeviceMesh::~DeviceMesh() = default;

ProcessGroup& DeviceMesh::group(Dim d) { return *groups_[static_cast<int>(d)]; }

}  // namespace heft::parallel
