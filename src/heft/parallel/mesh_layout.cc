// The pure layout of the device mesh (mesh_layout.h): LibTorch-free, shared by heft-train's
// DeviceMesh (mesh.h) and the Python extension's heft.torch.parallel.DeviceMesh.
#include "heft/parallel/mesh_layout.h"

#include <algorithm>
#include <utility>

#include "heft/error.h"

namespace heft::parallel {

namespace {

int letter_index(char c) { return c == 'D' ? 0 : c == 'P' ? 1 : 2; }

}  // namespace

std::string placement_order(const std::string& placement) {
  if (placement == "cluster") return "DPT";
  if (placement == "spread") return "TPD";
  std::string sorted = placement;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != "DPT")
    throw InvalidArgument("placement_strategy: expected cluster, spread or an order of the "
                          "letters D, P and T (such as DTP), found '" + placement + "'");
  return placement;
}

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
  order_ = placement_order(shape_.placement);
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

std::vector<std::vector<int>> MeshLayout::groups(Dim d) const {
  std::vector<std::vector<int>> out;
  std::vector<bool> seen(world_, false);
  for (int r = 0; r < world_; ++r) {
    if (seen[r]) continue;
    out.push_back(group(r, d));
    for (int q : out.back()) seen[q] = true;
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
    for (const std::vector<int>& g : groups(d)) {
      out += " {";
      for (size_t i = 0; i < g.size(); ++i) out += (i ? "," : "") + std::to_string(g[i]);
      out += "}";
    }
    out += "\n";
  }
  return out;
}

}  // namespace heft::parallel
