// ctest-labels: unit
// The worker contract (contract/worker.h): every variable heft's launchers and `heft train`
// give a worker is a row of the one table, docs/worker-contract.md holds that table as
// `heft contract` prints it, and heft's own variables are written and read by one typed pair.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "heft/comm/knobs.h"
#include "heft/comm/store/memory_store.h"
#include "heft/contract/worker.h"
#include "heft/error.h"
#include "heft/job/launch/external_group.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/worker_env.h"
#include "heft/job/paths.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"

namespace heft::job {
namespace {

// What `produced` adds to or changes in `parent`, every name of it a row of the table.
void expect_in_table(const Environment& parent, const Environment& produced, const char* who) {
  int added = 0;
  for (const auto& [name, value] : produced) {
    const auto before = parent.find(name);
    if (before != parent.end() && before->second == value) continue;
    ++added;
    EXPECT_NE(contract::find_variable(name), nullptr)
        << who << " sets " << name << ", which the worker contract's table does not list";
  }
  EXPECT_GT(added, 5) << who;
}

TEST(WorkerContract, EveryVariableALauncherSetsIsInTheTable) {
  const Environment parent = {{"PATH", "/bin"}, {"SM_HPS", "{}"}};  // SM_HPS: the toolkit's part runs
  JobEnvironment job;
  job.hosts = 2;
  job.processes_per_host = 2;
  job.store_address = "127.0.0.1:4000";
  job.token = std::string(64, 'a');
  job.python_path = "/heft/python";
  expect_in_table(parent, worker_environment(job, 3, parent), "worker_environment");

  const Result<JobSpec> spec = parse_spec(
      "name: contract-job\nentry_point: [python3, train.py]\n"
      "hyperparameters: {lr: 0.05}\ninputs: {train: /tmp}\n"
      "distribution: {modelparallel: {enabled: true, parameters: {partitions: 2}}}\n"
      "cluster: {instance_count: 1, processes_per_host: 2}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error();
  expect_in_table({}, training_environment(spec.value(), job_paths("/tmp/home", "contract-job")),
                  "training_environment");

  EngineOptions o;
  o.job_name = "contract-job";
  o.python_path = "/heft/python";
  expect_in_table({}, engine_start_variables(o, "127.0.0.1", 4000, "t", ""),
                  "engine_start_variables");
  expect_in_table({}, engine_worker_environment({}, 1, 2, 1, 2, 0, {"a", "b"}),
                  "engine_worker_environment");
  const Environment mpi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                           {"HEFT_MPI_HOSTS", "a"}};
  expect_in_table(mpi, mpi_worker_environment(mpi), "mpi_worker_environment");
}

std::string read_doc(const std::string& page) {
  std::ifstream in(std::string(HEFT_SOURCE_DIR) + "/docs/" + page);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The text between `<!-- MARKER: begin -->` and `<!-- MARKER: end -->` of docs/PAGE.
std::string generated_part(const std::string& page, const std::string& marker) {
  const std::string doc = read_doc(page);
  const std::string begin = "<!-- " + marker + ": begin -->\n", end = "<!-- " + marker + ": end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b)
    return "(docs/" + page + " has no " + marker + " markers)";
  return doc.substr(b + begin.size(), e - b - begin.size());
}

TEST(WorkerContract, TheDocsHoldTheTablesAsHeftContractPrintsThem) {
  EXPECT_EQ(generated_part("worker-contract.md", "heft contract"),
            contract::markdown(contract::worker_variables()))
      << "regenerate: build/heft contract, between the markers of docs/worker-contract.md";
  EXPECT_EQ(generated_part("comm.md", "heft contract --knobs"), comm::knobs_markdown())
      << "regenerate: build/heft contract --knobs, between the markers of docs/comm.md";
}

TEST(WorkerContract, EachVariableIsATableRowOfOneDocsPageOnly) {
  int rows = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HEFT_SOURCE_DIR) + "/docs")) {
    const std::string page = entry.path().filename().string();
    if (entry.path().extension() != ".md") continue;
    std::istringstream lines(read_doc(page));
    // Rows of tables that describe variables (header "| variable |"), not of examples.
    bool variables_table = false, in_table = false;
    for (std::string line; std::getline(lines, line);) {
      const bool row = line.rfind("|", 0) == 0;
      if (row && !in_table) variables_table = line.rfind("| variable |", 0) == 0;
      in_table = row;
      if (!variables_table || line.rfind("| `", 0) != 0) continue;
      const std::string name = line.substr(3, line.find('`', 3) - 3);
      const bool contract_row = contract::find_variable(name) != nullptr;
      bool knob_row = false;
      for (const comm::Knob& k : comm::tuning_knobs()) knob_row = knob_row || name == k.name;
      if (contract_row) {
        ++rows;
        EXPECT_EQ(page, "worker-contract.md") << page << " has a row of its own for " << name;
      }
      if (knob_row) {
        ++rows;
        EXPECT_EQ(page, "comm.md") << page << " has a row of its own for " << name;
      }
    }
  }
  EXPECT_EQ(rows, static_cast<int>(contract::worker_variables().size() + comm::tuning_knobs().size()));
}

// This process's environment with `name` set to `value` for one scope.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CommKnobs, EveryKnobIsReadAndAMalformedValueNamesIt) {
  int checked = 0;
  for (const comm::Knob& k : comm::tuning_knobs()) {
    if (!k.apply || std::string(k.name) == "HEFT_BIND_ADDRESS") continue;  // any text is an address
    ScopedVariable bad(k.name, "x!");
    try {
      comm::CommunicatorOptions::from_env();
      ADD_FAILURE() << k.name << "=x! was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(std::string(k.name) + ": ", 0), 0u) << e.what();
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
  {
    ScopedVariable small("HEFT_SMALL_MESSAGE_BYTES", "1234");
    ScopedVariable cores("HEFT_SHM_CORES", "off");
    ScopedVariable address("HEFT_BIND_ADDRESS", "10.1.2.3");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_EQ(o.small_message_bytes, 1234u);
    EXPECT_EQ(o.shm_core_group, 0);
    EXPECT_EQ(o.bind_address, "10.1.2.3");
  }
  // The timeout's default where comm's headers keep it as a member initialiser (options.h,
  // store.h: widely included, so written there as a literal) is the contract's.
  EXPECT_EQ(comm::CommunicatorOptions{}.timeout, std::chrono::seconds(contract::kDefaultTimeoutS));
  EXPECT_EQ(comm::MemoryStore().timeout(), std::chrono::seconds(contract::kDefaultTimeoutS));
  {
    ScopedVariable timeout("HEFT_TIMEOUT", "7");
    EXPECT_EQ(comm::CommunicatorOptions::from_env().timeout, std::chrono::seconds(7));
  }
}

// HEFT_SHM_SMALL_BYTES: unset or auto, the machine's measurement moves the small/direct
// crossover (a job's communicator); a size fixes the rule; options built in code keep the rule.
TEST(CommKnobs, TheSmallCrossoverIsMeasuredUnlessASizeIsGiven) {
  EXPECT_FALSE(comm::CommunicatorOptions{}.measure_shm_small);
  {
    ScopedVariable unset("HEFT_SHM_SMALL_BYTES", "");
    EXPECT_TRUE(comm::CommunicatorOptions::from_env().measure_shm_small);
  }
  {
    ScopedVariable automatic("HEFT_SHM_SMALL_BYTES", "auto");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_TRUE(o.measure_shm_small);
    EXPECT_EQ(o.shm_small_bytes, comm::CommunicatorOptions{}.shm_small_bytes);
  }
  {
    ScopedVariable fixed("HEFT_SHM_SMALL_BYTES", "4096");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_FALSE(o.measure_shm_small);
    EXPECT_EQ(o.shm_small_bytes, 4096u);
  }
}

// HEFT_SMALL_MESSAGE_BYTES likewise for the flat TCP allreduce's crossover.
TEST(CommKnobs, TheTcpCrossoverIsMeasuredUnlessASizeIsGiven) {
  EXPECT_FALSE(comm::CommunicatorOptions{}.measure_small_messages);
  {
    ScopedVariable automatic("HEFT_SMALL_MESSAGE_BYTES", "auto");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_TRUE(o.measure_small_messages);
    EXPECT_EQ(o.small_message_bytes, comm::CommunicatorOptions{}.small_message_bytes);
  }
  {
    ScopedVariable fixed("HEFT_SMALL_MESSAGE_BYTES", "8192");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_FALSE(o.measure_small_messages);
    EXPECT_EQ(o.small_message_bytes, 8192u);
  }
}

// HEFT_SHM_CORES_MIN_BYTES likewise for the core-grouped crossover.
TEST(CommKnobs, TheCoresCrossoverIsMeasuredUnlessASizeIsGiven) {
  EXPECT_FALSE(comm::CommunicatorOptions{}.measure_shm_cores);
  {
    ScopedVariable unset("HEFT_SHM_CORES_MIN_BYTES", "");
    EXPECT_TRUE(comm::CommunicatorOptions::from_env().measure_shm_cores);
  }
  {
    ScopedVariable automatic("HEFT_SHM_CORES_MIN_BYTES", "auto");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_TRUE(o.measure_shm_cores);
    EXPECT_EQ(o.shm_cores_min_bytes, comm::CommunicatorOptions{}.shm_cores_min_bytes);
  }
  {
    ScopedVariable fixed("HEFT_SHM_CORES_MIN_BYTES", "65536");
    const comm::CommunicatorOptions o = comm::CommunicatorOptions::from_env();
    EXPECT_FALSE(o.measure_shm_cores);
    EXPECT_EQ(o.shm_cores_min_bytes, 65536u);
  }
  {
    ScopedVariable bad("HEFT_SHM_CORES_MIN_BYTES", "lots");
    EXPECT_THROW(comm::CommunicatorOptions::from_env(), InvalidArgument);
  }
}

TEST(WorkerContract, HeftVariablesAreWrittenAndReadByOnePair) {
  contract::HeftVariables v;
  v.store = "10.0.0.1:5000";
  v.token = "secret";
  v.timeout_s = 42;
  v.stop_grace_ms = 0;
  Environment env = {{"OTHER", "x"}};
  v.write(env);
  EXPECT_EQ(env.at("HEFT_TIMEOUT"), "42");
  EXPECT_EQ(env.count("HEFT_JOB"), 0u);  // unset fields are not written
  const contract::HeftVariables r = contract::HeftVariables::read(env);
  EXPECT_EQ(r.store, v.store);
  EXPECT_EQ(r.token, v.token);
  EXPECT_EQ(r.timeout(), 42);
  EXPECT_EQ(r.stop_grace(), 0);
  EXPECT_EQ(r.job_name(), contract::kDefaultJob);

  const contract::HeftVariables unset = contract::HeftVariables::read({{"HEFT_TIMEOUT", ""}});
  EXPECT_FALSE(unset.timeout_s.has_value());  // empty counts as unset
  EXPECT_EQ(unset.timeout(), contract::kDefaultTimeoutS);
  EXPECT_EQ(unset.stop_grace(), contract::kDefaultStopGraceMs);

  for (const char* bad : {"0", "-3", "5s", "99999999999"}) {
    try {
      contract::HeftVariables::read({{"HEFT_TIMEOUT", bad}});
      ADD_FAILURE() << "HEFT_TIMEOUT=" << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("HEFT_TIMEOUT: expected an integer >= 1"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(contract::HeftVariables::read({{"HEFT_STOP_GRACE_MS", "-1"}}), InvalidArgument);
}

TEST(WorkerContract, InPlaceRecoveryVariablesNameTheGenerationsWorld) {
  contract::HeftVariables v;
  v.recovery = "in_place";
  v.generation = 2;
  Environment env;
  v.write(env);
  EXPECT_EQ(env.at("HEFT_RECOVERY"), "in_place");
  EXPECT_EQ(env.at("HEFT_GENERATION"), "2");
  const contract::HeftVariables r = contract::HeftVariables::read(env);
  EXPECT_TRUE(r.in_place_recovery());
  EXPECT_EQ(r.generation, 2);
  EXPECT_FALSE(contract::HeftVariables::read({}).in_place_recovery());
  EXPECT_EQ(contract::world_group("job", 0), "job/world");  // the first world keeps its name
  EXPECT_EQ(contract::world_group("job", 3), "job/world.g3");
  EXPECT_NE(contract::generation_key("job"), contract::formed_key("job"));
  try {
    contract::HeftVariables::read({{"HEFT_RECOVERY", "yes"}});
    ADD_FAILURE() << "HEFT_RECOVERY=yes was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HEFT_RECOVERY: expected in_place, found 'yes'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(contract::HeftVariables::read({{"HEFT_GENERATION", "-1"}}), InvalidArgument);
}

TEST(WorkerContract, ASpecMaySetOnlyWhatHeftDoesNot) {
  for (const char* name : {"RANK", "MASTER_PORT", "HEFT_TOKEN", "HEFT_TIMEOUT", "SM_HPS",
                           "SM_HP_LR", "SM_ANYTHING", "TRAINING_JOB_NAME"})
    EXPECT_TRUE(contract::reserved(name)) << name;
  for (const char* name : {"OMP_NUM_THREADS", "PYTHONPATH", "MY_SETTING", "HEFT_PROFILE_DIR"})
    EXPECT_FALSE(contract::reserved(name)) << name;
  EXPECT_NE(contract::find_variable("SM_CHANNEL_TRAIN"), nullptr);
  EXPECT_EQ(contract::find_variable("SM_CHANNEL_"), nullptr);
  EXPECT_EQ(contract::find_variable("NOT_A_HEFT_VARIABLE"), nullptr);
}

}  // namespace
}  // namespace heft::job
