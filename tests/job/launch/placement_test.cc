// ctest-labels: unit
// Where the local launcher puts its workers (placement.h).
#include "heft/job/launch/placement.h"

#include <gtest/gtest.h>

#include "heft/error.h"

namespace heft::job {
namespace {

using Plan = std::vector<std::vector<int>>;

TEST(Placement, WorkersThatFitGetDisjointEqualShares) {
  EXPECT_EQ(plan_placement({0, 1}, 2, Bind::kCore), (Plan{{0}, {1}}));
  EXPECT_EQ(plan_placement({0, 1, 2, 3, 4, 5, 6, 7}, 4, Bind::kCore),
            (Plan{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // cores ÷ workers each, the remainder unused; the pool is the launcher's own CPUs.
  EXPECT_EQ(plan_placement({2, 3, 5, 8, 9}, 2, Bind::kCore), (Plan{{2, 3}, {5, 8}}));
}

TEST(Placement, NothingIsNarrowedWhenItShouldNotBe) {
  EXPECT_EQ(plan_placement({0}, 4, Bind::kCore), (Plan{{}, {}, {}, {}}));  // one CPU for all
  EXPECT_EQ(plan_placement({0, 1, 2, 3}, 1, Bind::kCore), (Plan{{}}));         // a single rank
  EXPECT_EQ(plan_placement({0, 1, 2, 3}, 2, Bind::kNone), (Plan{{}, {}}));     // HEFT_BIND=none
  EXPECT_EQ(plan_placement({}, 2, Bind::kCore), (Plan{{}, {}}));
}

TEST(Placement, MoreWorkersThanCpusShareThemConsecutively) {
  EXPECT_EQ(plan_placement({0, 1}, 4, Bind::kCore), (Plan{{0}, {0}, {1}, {1}}));
  EXPECT_EQ(plan_placement({2, 5}, 3, Bind::kCore), (Plan{{2}, {2}, {5}}));
  EXPECT_EQ(plan_placement({0, 1, 2}, 7, Bind::kCore), (Plan{{0}, {0}, {0}, {1}, {1}, {2}, {2}}));
  EXPECT_EQ(plan_placement({0, 1}, 4, Bind::kNone), (Plan{{}, {}, {}, {}}));  // HEFT_BIND=none
}

TEST(Placement, BindValues) {
  EXPECT_EQ(parse_bind(""), Bind::kCore);
  EXPECT_EQ(parse_bind("core"), Bind::kCore);
  EXPECT_EQ(parse_bind("none"), Bind::kNone);
  try {
    parse_bind("numa");
    FAIL() << "accepted numa";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "HEFT_BIND: expected core or none, found 'numa'");
  }
}

TEST(Placement, CpuListsReadLikeTheKernels) {
  EXPECT_EQ(cpu_list({}), "");
  EXPECT_EQ(cpu_list({3}), "3");
  EXPECT_EQ(cpu_list({0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_FALSE(allowed_cpus().empty());
}

}  // namespace
}  // namespace heft::job
