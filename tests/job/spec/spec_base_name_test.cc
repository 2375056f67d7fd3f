// ctest-labels: unit
// A spec's base_name (src/heft/job/spec/spec.h): it stands in for `name` (the job is named
// base_name-<UTC time> when recorded), is checked like a name with room left for the suffix,
// and a name, in the spec or from --name, wins over it.
#include <gtest/gtest.h>

#include <string>

#include "heft/job/record/job_db.h"
#include "heft/job/spec/spec.h"

namespace heft::job {
namespace {

const std::string kRest = "entry_point: [/bin/true]\n";

TEST(SpecBaseName, StandsInForTheNameAndNamesTheJobWhenRecorded) {
  const Result<JobSpec> s = parse_spec("base_name: fashion-cnn\n" + kRest, "t.yaml");
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s.value().name, "");
  EXPECT_EQ(s.value().base_name, "fashion-cnn");
  // The longest base name with its suffix and a counter is still a valid job name.
  const std::string longest(32, 'b');
  const std::string named = timestamped_name(longest, 1795277295.788, 99);
  const Result<JobSpec> n = parse_spec("name: " + named + "\n" + kRest, "t.yaml");
  EXPECT_TRUE(n.ok()) << n.error();
  EXPECT_TRUE(parse_spec("base_name: " + longest + "\n" + kRest, "t.yaml").ok());
}

TEST(SpecBaseName, ANameWinsOverIt) {
  const Result<JobSpec> s =
      parse_spec("name: mine\nbase_name: fashion-cnn\n" + kRest, "t.yaml");
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s.value().name, "mine");
  const Result<JobSpec> o =
      parse_spec("base_name: fashion-cnn\n" + kRest, "t.yaml", {"name=other"});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o.value().name, "other");
}

TEST(SpecBaseName, IsCheckedLikeANameAndOneOfTheTwoIsRequired) {
  const Result<JobSpec> none = parse_spec(kRest, "t.yaml");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("t.yaml: name: required (or base_name)"), std::string::npos)
      << none.error();
  for (const std::string& bad :
       {std::string("fashion_cnn"), std::string("-x"), std::string(33, 'b')}) {
    const Result<JobSpec> r = parse_spec("base_name: " + bad + "\n" + kRest, "t.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().find("base_name: expected letters, digits and '-' (not first or last), "
                             "at most 32 characters, found '" + bad + "'"),
              std::string::npos)
        << r.error();
    EXPECT_EQ(r.error().find("name: required"), std::string::npos) << r.error();
  }
  const Result<JobSpec> typo = parse_spec("base_nme: x\n" + kRest, "t.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.error().find("did you mean 'base_name'?"), std::string::npos) << typo.error();
}

}  // namespace
}  // namespace heft::job
