// ctest-labels: unit
// The layers of DESIGN.md, enforced: a source file may include only what its layer depends
// on (comm and job know nothing of tensors; parallel never reaches up into train, job or
// cli; config is torch-free). A regression test for the layout itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Rule {
  std::string layer;      // folder under src/heft (or relative to it)
  std::string forbidden;  // regex on an #include line
  std::string why;
};

TEST(Layering, EachLayerIncludesOnlyWhatItDependsOn) {
  const std::vector<Rule> rules = {
      {"comm", R"(#include [<"](torch/|heft/(parallel|train|job|cli|tune|profile|config|step_profiler|cuda)/))",
       "comm depends on the OS only"},
      {"cuda", R"(#include [<"](torch/|heft/(parallel|train|job|cli|tune|profile|config|step_profiler)/))",
       "the CUDA parts sit on comm and the CUDA toolkit: torch-free, no job or training"},
      {"contract", R"(#include [<"](torch/|heft/(?!contract/|error\.h)))",
       "the worker contract depends on nothing (heft/error.h and the standard library)"},
      {"host", R"(#include [<"](torch/|heft/(?!host/|error\.h)))",
       "host facts depend on nothing (heft/error.h and the OS)"},
      {"config", R"(#include [<"](torch/|heft/(comm|parallel|train|job|cli|tune|profile|step_profiler)/))",
       "config is plain data, read by job and train"},
      {"step_profiler", R"(#include [<"](torch/|heft/(?!step_profiler/)))",
       "the step profiler depends on nothing (training programs of every layer include it)"},
      {"job", R"(#include [<"](torch/|heft/(parallel|train|cli|tune|profile|step_profiler)/))",
       "job knows nothing of training"},
      // Both may report step timings through step_profiler/ (its own library,
      // heft_step_profiler, which depends on nothing), and nothing of profile.
      {"parallel", R"(#include [<"]heft/(train|job|cli|tune|profile)/)",
       "parallel depends on comm and LibTorch only (and the step profiler's API)"},
      {"train", R"(#include [<"]heft/(job|cli|tune|profile)/)",
       "train depends on parallel (and config, and the step profiler's API)"},
      {"tune", R"(#include [<"](torch/|heft/(parallel|train|cli|profile|step_profiler)/))",
       "tune searches over jobs: it depends on job, never on training or the CLI"},
      {"profile", R"(#include [<"](torch/|heft/(parallel|train|cli|tune)/))",
       "profile depends on job (and comm), never on LibTorch"},
      {"cli", R"(#include [<"](torch/|heft/(parallel|train)/))",
       "the heft command is torch-free: it starts heft-train, never links it"},
      // The Python package's extension sits on comm and parallel (the C++ core), never on
      // the job service, the CLI or heft-train.
      {"../../python/heft", R"(#include [<"]heft/(job|cli|tune|profile|train)/)",
       "the Python package uses the C++ core (comm, parallel, step profiler) only"},
  };
  size_t checked = 0;
  std::vector<std::string> broken;
  for (const Rule& rule : rules) {
    const std::regex forbidden(rule.forbidden);
    const fs::path root = fs::path(HEFT_SOURCE_DIR) / "src" / "heft" / rule.layer;
    if (!fs::exists(root)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc") continue;
      ++checked;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        if (std::regex_search(line, forbidden))
          broken.push_back(entry.path().string() + ":" + std::to_string(n) + ": " + line + "  (" +
                           rule.why + ")");
    }
  }
  EXPECT_GT(checked, 50u);
  for (const std::string& b : broken) ADD_FAILURE() << b;
}

}  // namespace
