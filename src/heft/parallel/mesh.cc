#include "heft/parallel/mesh.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "heft/comm/trace.h"
#include "heft/error.h"

namespace heft::parallel {

namespace {

int letter_index(char c) { return c == 'D' ? 0 : c == 'P' ? 1 : 2; }

std::string order_of(const std::string& placement) {
  if (placement == "cluster") return "DPT";
  if (placement == "spread") return "TPD";
  std::string sorted = placement;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != "DPT")
    throw InvalidArgument("placement_strategy: expected cluster, spread or an order of the "
                          "letters D, P and T (such as DTP), found '" + placement + "'");
  return placement;
}

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

const char* name(Dim d) {
  static const char* kNames[] = {"data", "pipeline", "tensor", "replicate", "shard"};
  return kNames[static_cast<int>(d)];
}

MeshLayout::MeshLayout(int world, MeshShape shape) : world_(world), shape_(std::move(shape)) {
  auto positive = [](int v, const char* field) {
    if (v < 1)
      throw InvalidArgument(std::string(field) + ": expected at least 1, found " +
                            std::to_string(v));
  };
  positive(shape_.data, "data parallel degree");
  positive(shape_.pipeline, "pipeline parallel degree (partitions)");
  positive(shape_.tensor, "tensor_parallel_degree");
  if (shape_.shard == 0) shape_.shard = shape_.data;
  if (shape_.shard < 1 || shape_.data % shape_.shard != 0)
    throw InvalidArgument("sharded_data_parallel_degree: expected a divisor of the data "
                          "parallel degree " + std::to_string(shape_.data) + ", found " +
                          std::to_string(shape_.shard));
  if (shape_.data * shape_.pipeline * shape_.tensor != world)
    throw InvalidArgument("the mesh: data " + std::to_string(shape_.data) + " x pipeline " +
                          std::to_string(shape_.pipeline) + " x tensor " +
                          std::to_string(shape_.tensor) + " = " +
                          std::to_string(shape_.data * shape_.pipeline * shape_.tensor) +
                          " ranks, but the world has " + std::to_string(world));
  order_ = order_of(shape_.placement);
  const std::array<int, 3> sizes = {shape_.data, shape_.pipeline, shape_.tensor};
  int stride = 1;
  for (int i = 2; i >= 0; --i) {  // right-most letter fastest
    const int dim = letter_index(order_[i]);
    stride_[dim] = stride;
    stride *= sizes[dim];
  }
}

int MeshLayout::size(Dim d) const {
  switch (d) {
    case Dim::kData: return shape_.data;
    case Dim::kPipeline: return shape_.pipeline;
    case Dim::kTensor: return shape_.tensor;
    case Dim::kShard: return shape_.shard;
    case Dim::kReplicate: return shape_.data / shape_.shard;
  }
  return 1;
}

int MeshLayout::coordinate(int rank, Dim d) const {
  auto along = [&](int i, int n) { return rank / stride_[i] % n; };
  const int data = along(0, shape_.data);
  switch (d) {
    case Dim::kData: return data;
    case Dim::kPipeline: return along(1, shape_.pipeline);
    case Dim::kTensor: return along(2, shape_.tensor);
    case Dim::kShard: return data % shape_.shard;
    case Dim::kReplicate: return data / shape_.shard;
  }
  return 0;
}

int MeshLayout::rank_at(int data, int pipeline, int tensor) const {
  return data * stride_[0] + pipeline * stride_[1] + tensor * stride_[2];
}

std::vector<int> MeshLayout::group(int rank, Dim d) const {
  const int data = coordinate(rank, Dim::kData), p = coordinate(rank, Dim::kPipeline),
            t = coordinate(rank, Dim::kTensor);
  std::vector<int> out;
  switch (d) {
    case Dim::kData:
      for (int i = 0; i < shape_.data; ++i) out.push_back(rank_at(i, p, t));
      break;
    case Dim::kPipeline:
      for (int i = 0; i < shape_.pipeline; ++i) out.push_back(rank_at(data, i, t));
      break;
    case Dim::kTensor:
      for (int i = 0; i < shape_.tensor; ++i) out.push_back(rank_at(data, p, i));
      break;
    case Dim::kShard: {
      const int first = data / shape_.shard * shape_.shard;
      for (int i = 0; i < shape_.shard; ++i) out.push_back(rank_at(first + i, p, t));
      break;
    }
    case Dim::kReplicate: {
      const int s = data % shape_.shard;
      for (int i = 0; i < shape_.data / shape_.shard; ++i)
        out.push_back(rank_at(i * shape_.shard + s, p, t));
      break;
    }
  }
  return out;
}

std::string MeshLayout::describe() const {
  std::string out = "mesh: " + std::to_string(world_) + " ranks = data " +
                    std::to_string(shape_.data) + " (replicate " +
                    std::to_string(size(Dim::kReplicate)) + " x shard " +
                    std::to_string(shape_.shard) + ") x pipeline " +
                    std::to_string(shape_.pipeline) + " x tensor " +
                    std::to_string(shape_.tensor) + ", placement " + order_ + "\n";
  for (Dim d : {Dim::kTensor, Dim::kPipeline, Dim::kData, Dim::kShard, Dim::kReplicate}) {
    out += std::string("  ") + name(d) + " (" + std::to_string(size(d)) + "):";
    std::vector<bool> seen(world_, false);
    for (int r = 0; r < world_; ++r) {
      if (seen[r]) continue;
      const std::vector<int> g = group(r, d);
      out += " {";
      for (size_t i = 0; i < g.size(); ++i) {
        seen[g[i]] = true;
        out += (i ? "," : "") + std::to_string(g[i]);
      }
      out += "}";
    }
    out += "\n";
  }
  return out;
}

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
