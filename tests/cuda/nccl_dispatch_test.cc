// Which path a CUDA collective takes (cuda/nccl_dispatch.h), without a device: NCCL's types and
// operators for heft's, the group's path from its ranks' GPUs (own GPUs: NCCL; a shared GPU, a
// rank without one, no NCCL: staging, saying why), each call's (staging for what NCCL lacks);
// and the NCCL communicator refusing, naming the runtime's reason, where there is no GPU.
#include <gtest/gtest.h>

#include <chrono>

#include "heft/comm/store/memory_store.h"
#include "heft/cuda/devices.h"
#include "heft/cuda/nccl_communicator.h"
#include "heft/cuda/nccl_dispatch.h"
#include "heft/error.h"

namespace heft::cuda {
namespace {

using comm::DataType;
using comm::ReduceOp;

TEST(NcclDispatch, TypesAndOperatorsNcclHas) {
  EXPECT_EQ(nccl_type(DataType::f32), ncclFloat32);
  EXPECT_EQ(nccl_type(DataType::bf16), ncclBfloat16);
  EXPECT_EQ(nccl_type(DataType::f16), ncclFloat16);
  EXPECT_EQ(nccl_type(DataType::f64), ncclFloat64);
  EXPECT_EQ(nccl_type(DataType::i64), ncclInt64);
  EXPECT_EQ(nccl_type(DataType::u8), ncclUint8);
  int mapped = 0;
  for (DataType t : comm::kEveryDataType) mapped += nccl_type(t).has_value();
  EXPECT_EQ(mapped, 8) << "every type but i16";
  EXPECT_FALSE(nccl_type(DataType::i16));
  EXPECT_EQ(nccl_op(ReduceOp::sum), ncclSum);
  EXPECT_EQ(nccl_op(ReduceOp::avg), ncclAvg);
  EXPECT_EQ(nccl_op(ReduceOp::product), ncclProd);
  for (ReduceOp op : {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor}) EXPECT_FALSE(nccl_op(op));
}

TEST(NcclDispatch, GroupPathFromTheRanksGpus) {
  const PathChoice own = choose_group_path({"0000:19:00.0", "0000:3b:00.0"}, true);
  EXPECT_EQ(own.path, CudaPath::kNccl) << own.why;
  const PathChoice one = choose_group_path({"0000:19:00.0"}, true);
  EXPECT_EQ(one.path, CudaPath::kNccl) << "world size 1 runs on one GPU";
  const PathChoice shared = choose_group_path({"0000:19:00.0", "0000:3b:00.0", "0000:19:00.0"}, true);
  EXPECT_EQ(shared.path, CudaPath::kStaging);
  EXPECT_EQ(shared.why, "ranks 0 and 2 share GPU 0000:19:00.0 (NCCL refuses two ranks on one GPU)");
  const PathChoice none = choose_group_path({"0000:19:00.0", ""}, true);
  EXPECT_EQ(none.path, CudaPath::kStaging);
  EXPECT_EQ(none.why, "rank 1 has no GPU");
  const PathChoice no_nccl = choose_group_path({"a", "b"}, false);
  EXPECT_EQ(no_nccl.path, CudaPath::kStaging);
  EXPECT_EQ(no_nccl.why, "NCCL is not available");
  EXPECT_THROW(choose_group_path({}, true), InvalidArgument);
  EXPECT_STREQ(path_name(CudaPath::kNccl), "nccl");
  EXPECT_STREQ(path_name(CudaPath::kStaging), "staging");
}

TEST(NcclDispatch, CallsNcclCannotRunAreStaged) {
  const PathChoice group = choose_group_path({"a", "b"}, true);
  EXPECT_EQ(choose_call_path(group, DataType::f32, ReduceOp::sum).path, CudaPath::kNccl);
  EXPECT_EQ(choose_call_path(group, DataType::bf16, std::nullopt).path, CudaPath::kNccl);
  const PathChoice i16 = choose_call_path(group, DataType::i16, ReduceOp::sum);
  EXPECT_EQ(i16.path, CudaPath::kStaging);
  EXPECT_EQ(i16.why, std::string("NCCL has no type ") + comm::name(DataType::i16));
  const PathChoice bxor = choose_call_path(group, DataType::i32, ReduceOp::bxor);
  EXPECT_EQ(bxor.path, CudaPath::kStaging);
  EXPECT_EQ(bxor.why, std::string("NCCL has no operator ") + comm::name(ReduceOp::bxor));
  EXPECT_EQ(choose_call_path(group, DataType::i16, std::nullopt).path, CudaPath::kStaging)
      << "a gather of a type NCCL lacks";
  const PathChoice staged = choose_group_path({"a", "a"}, true);
  EXPECT_EQ(choose_call_path(staged, DataType::f32, ReduceOp::sum).why, staged.why);
}

TEST(NcclDispatch, CommunicatorWithoutAGpuIsRefusedNamingTheReason) {
  const GpuInventory inv = probe_gpus();
  if (!inv.devices.empty()) GTEST_SKIP() << "this machine has a GPU: nccl_device_test covers it";
  comm::MemoryStore store;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    NcclCommunicator::create(store, "job/world", 0, 1, 0, std::chrono::seconds(5));
    FAIL() << "created an NCCL communicator without a GPU";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: nccl job/world: no GPU ("), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(inv.reason.substr(0, 20)), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "at once, no wait";
  EXPECT_THROW(NcclCommunicator::create(store, "g", 2, 2, 0, std::chrono::seconds(1)), InvalidArgument);
}

}  // namespace
}  // namespace heft::cuda
