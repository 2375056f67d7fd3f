// ctest-labels: multiproc
// One allreduce plan (comm/allreduce_plan.h): the rule for the host's step, the path each plan
// reports, and, end to end, that a call runs the plan the options ask for, whatever the
// counters of other calls say: the plan is decided before any byte moves and reported as run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

using test::expect;
using Form = CommunicatorOptions::ShmForm;

TEST(AllreducePlan, FlatStepIsARuleOfSizeAndForm) {
  EXPECT_EQ(flat_shm_step(16 << 10, 16 << 10, Form::kAuto, true), ShmStep::kSmall);
  EXPECT_EQ(flat_shm_step(16 << 10, 16 << 10, Form::kSlots, true), ShmStep::kSmall);
  EXPECT_EQ(flat_shm_step((16 << 10) + 1, 16 << 10, Form::kAuto, true), ShmStep::kDirect);
  EXPECT_EQ(flat_shm_step(1 << 20, 16 << 10, Form::kDirect, true), ShmStep::kDirect);
  EXPECT_EQ(flat_shm_step(1 << 20, 16 << 10, Form::kSlots, false), ShmStep::kSlots);
  EXPECT_EQ(flat_shm_step(1 << 20, 16 << 10, Form::kSingleCopy, true), ShmStep::kSingleCopy);
  // Where the kernel forbids cross-memory attach the plan says direct, not a form that fails.
  EXPECT_EQ(flat_shm_step(1 << 20, 16 << 10, Form::kSingleCopy, false), ShmStep::kDirect);
}

TEST(AllreducePlan, PathNamesThePlan) {
  EXPECT_EQ(AllreducePlan{}.path(), "");
  EXPECT_EQ((AllreducePlan{Algorithm::kShm, ShmStep::kDirect, true, 1}.path()), "shm/direct");
  EXPECT_EQ((AllreducePlan{Algorithm::kShm, ShmStep::kCores, false, 1}.path()), "shm/cores");
  EXPECT_EQ((AllreducePlan{Algorithm::kShm, ShmStep::kSingleCopy, false, 1}.path()),
            "shm/single_copy");
  EXPECT_EQ((AllreducePlan{Algorithm::kHierarchical, ShmStep::kDirect, false, 1}.path()),
            "hierarchical(shm/direct)");
  EXPECT_EQ((AllreducePlan{Algorithm::kHierarchical, ShmStep::kNone, false, 1}.path()),
            "hierarchical(leaders)");
  EXPECT_EQ((AllreducePlan{Algorithm::kRing, ShmStep::kNone, false, 1}.path()), "ring");
  EXPECT_EQ((AllreducePlan{Algorithm::kRecursiveDoubling, ShmStep::kNone, false, 1}.path()),
            "recursive_doubling");
}

// Each form asked for on 3 ranks of one host, the plan of every call checked against the one
// asked for, sizes alternating across the small threshold, results exact.
TEST(AllreducePlan, EachCallRunsThePlanAskedFor) {
  struct Case {
    Form form;
    Algorithm algorithm;
    ShmStep large;
  };
  for (const Case& k : {Case{Form::kAuto, Algorithm::kAuto, ShmStep::kDirect},
                        Case{Form::kSlots, Algorithm::kAuto, ShmStep::kSlots},
                        Case{Form::kSingleCopy, Algorithm::kAuto, ShmStep::kSingleCopy},
                        Case{Form::kAuto, Algorithm::kRing, ShmStep::kNone},
                        Case{Form::kAuto, Algorithm::kRecursiveDoubling, ShmStep::kNone}}) {
    CommunicatorOptions o;
    o.shm_form = k.form;
    o.allreduce_algorithm = k.algorithm;
    o.shm_placement = CommunicatorOptions::ShmPlacement::kNear;
    test::StoreProcess store;
    auto res = test::run_world(3, store, [&](Communicator& c) {
      for (int call = 0; call < 6; ++call) {
        const size_t count = call % 2 ? (size_t{1} << 18) : 64;  // 1 MiB, 256 B
        std::vector<float> x(count, static_cast<float>(c.rank() + call));
        c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        expect(x[0] == static_cast<float>(3 + 3 * call) && x[count - 1] == x[0],
               "call " + std::to_string(call) + ": " + std::to_string(x[0]));
        const AllreducePlan plan = c.last_allreduce_plan();
        AllreducePlan want{k.algorithm == Algorithm::kAuto ? Algorithm::kShm : k.algorithm,
                           ShmStep::kNone, false, count * 4};
        if (want.algorithm == Algorithm::kShm) {
          want.shm = count * 4 <= o.shm_small_bytes ? ShmStep::kSmall : k.large;
          // Cross-memory attach may be forbidden here (Yama, seccomp): the plan then says
          // direct, and the single-copy count shows which ran.
          if (want.shm == ShmStep::kSingleCopy && c.shm_path_counts().single_copy == 0)
            want.shm = ShmStep::kDirect;
        }
        expect(plan == want, "call " + std::to_string(call) + " of form " +
                                 std::to_string(static_cast<int>(k.form)) + ": planned " +
                                 plan.path() + ", asked for " + want.path());
        expect(c.last_allreduce_path() == want.path(), c.last_allreduce_path());
      }
    }, o);
    EXPECT_TRUE(res.all_ok()) << name(k.large) << "\n" << res.summary();
  }
}

}  // namespace
}  // namespace heft::comm
