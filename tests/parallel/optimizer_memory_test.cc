// ctest-labels: unit
// The memory model's optimizer figures (parallel/layout/optimizer_memory.h), one table for
// heft-train's auto layout, the Python auto_layout and ShardedDataParallel's pre-flight:
// Adam keeps two state copies and a step scalar and makes two temporaries; SGD with momentum
// one of each; plain SGD adds the gradient in place (none: the Python side said one before
// the table); an unknown optimizer is refused naming the known ones.
#include <gtest/gtest.h>

#include <string>

#include "heft/error.h"
#include "heft/parallel/layout/optimizer_memory.h"

namespace {

namespace pl = heft::parallel::layout;

TEST(OptimizerMemory, OneTableOfHeftTrainsFigures) {
  EXPECT_EQ(pl::optimizer_memory("adamw").state_per_element, 2);
  EXPECT_EQ(pl::optimizer_memory("adamw").state_bytes_per_tensor, 4);
  EXPECT_EQ(pl::optimizer_memory("adamw").step_tensor_copies, 2);
  EXPECT_EQ(pl::optimizer_memory("adam-amsgrad").state_per_element, 3);
  EXPECT_EQ(pl::optimizer_memory("sgd-momentum").state_per_element, 1);
  EXPECT_EQ(pl::optimizer_memory("sgd-momentum").step_tensor_copies, 1);
  EXPECT_EQ(pl::optimizer_memory("sgd").state_per_element, 0);
  EXPECT_EQ(pl::optimizer_memory("sgd").step_tensor_copies, 0);
  EXPECT_EQ(pl::optimizer_memory("none").step_tensor_copies, 0);
  EXPECT_EQ(pl::optimizer_memories().size(), 7u);
  try {
    pl::optimizer_memory("lamb");
    ADD_FAILURE() << "lamb was accepted";
  } catch (const heft::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer 'lamb': expected one of adamw, adam,"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
