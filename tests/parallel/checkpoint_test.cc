// ctest-labels: unit
// CheckpointDirectory: round trips of blobs, modules, optimizers and the RNG; a corrupt
// newest checkpoint falls back to the previous one with a warning; half-written ones are
// ignored; keep bounds how many stay; locate_latest_parts (heft.torch's reader) verifies
// every part's files streamed and skips a corrupt or single-writer newer checkpoint.
// A crafted archive (TorchScript that creates a file when LibTorch's loader unpickles it, a
// pickled os.system, a registered C++ class) with a valid CRC is refused naming the file,
// and nothing in it runs. In-place recovery's raw copy of a part gives back the files the
// checkpoint writes.
#include "heft/parallel/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "heft/error.h"
#include "heft/parallel/sharded/sharded_checkpoint.h"
#include "heft/parallel/torch_state.h"

namespace {

namespace fs = std::filesystem;
using heft::parallel::CheckpointData;
using heft::parallel::CheckpointDirectory;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("heft-checkpoint-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static CheckpointData data(int64_t step) {
    CheckpointData d;
    d.step = step;
    d.meta_json = "{\"epoch\":" + std::to_string(step * 10) + "}";
    d.files["a.bin"] = std::string("alpha\0beta", 10) + std::to_string(step);
    d.files["b.bin"] = std::string(1000, static_cast<char>(step));
    return d;
  }

  fs::path dir_;
};

std::string step_dir(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld", static_cast<long long>(step));
  return buf;
}

TEST_F(CheckpointTest, SaveThenLoadReturnsTheSameFilesAndMeta) {
  CheckpointDirectory ckpt(dir_.string(), 2);
  ckpt.save(data(7));
  std::ostringstream warnings;
  const auto loaded = ckpt.load_latest(warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 7);
  EXPECT_EQ(loaded->meta_json, "{\"epoch\":70}");
  EXPECT_EQ(loaded->files, data(7).files);
  EXPECT_EQ(warnings.str(), "");
  EXPECT_TRUE(fs::exists(dir_ / step_dir(7) / "manifest.json"));
}

TEST_F(CheckpointTest, NoDirectoryMeansNoCheckpoint) {
  EXPECT_FALSE(CheckpointDirectory(dir_.string(), 1).load_latest().has_value());
}

TEST_F(CheckpointTest, CorruptNewestFallsBackToThePreviousWithAWarning) {
  CheckpointDirectory ckpt(dir_.string(), 3);
  ckpt.save(data(1));
  ckpt.save(data(2));
  {
    std::fstream f(dir_ / step_dir(2) / "b.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('x');
  }
  std::ostringstream warnings;
  const auto loaded = ckpt.load_latest(warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 1);
  EXPECT_NE(warnings.str().find("skipping " + (dir_ / step_dir(2)).string() +
                                ": b.bin does not match its size or crc32"),
            std::string::npos)
      << warnings.str();
}

TEST_F(CheckpointTest, HalfWrittenCheckpointsAreIgnored) {
  CheckpointDirectory ckpt(dir_.string(), 3);
  ckpt.save(data(1));
  // A save killed before its rename, and a directory with no manifest.
  fs::create_directories(dir_ / ".tmp-ckpt-000000000005-123");
  std::ofstream(dir_ / ".tmp-ckpt-000000000005-123" / "a.bin") << "partial";
  fs::create_directories(dir_ / step_dir(4));
  std::ofstream(dir_ / step_dir(4) / "a.bin") << "partial";
  std::ostringstream warnings;
  const auto loaded = ckpt.load_latest(warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 1);
  EXPECT_NE(warnings.str().find("no readable manifest.json"), std::string::npos)
      << warnings.str();
  // The next save clears the leftover temporary directory.
  ckpt.save(data(6));
  EXPECT_FALSE(fs::exists(dir_ / ".tmp-ckpt-000000000005-123"));
}

TEST_F(CheckpointTest, KeepTwoKeepsTheTwoNewest) {
  CheckpointDirectory ckpt(dir_.string(), 2);
  for (int64_t s : {3, 6, 9}) ckpt.save(data(s));
  EXPECT_FALSE(fs::exists(dir_ / step_dir(3)));
  EXPECT_TRUE(fs::exists(dir_ / step_dir(6)));
  EXPECT_TRUE(fs::exists(dir_ / step_dir(9)));
  EXPECT_EQ(ckpt.load_latest()->step, 9);
}

TEST_F(CheckpointTest, BadArgumentsAreRefused) {
  EXPECT_THROW(CheckpointDirectory(dir_.string(), 0), heft::InvalidArgument);
  CheckpointData d = data(1);
  d.files["manifest.json"] = "x";
  EXPECT_THROW(CheckpointDirectory(dir_.string(), 1).save(d), heft::InvalidArgument);
}

TEST_F(CheckpointTest, ModuleOptimizerAndRngRoundTrip) {
  torch::manual_seed(1);
  torch::nn::Linear a(4, 3), b(4, 3);
  torch::optim::SGD opt_a(a->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const torch::Tensor x = torch::randn({5, 4});
  a->forward(x).sum().backward();
  opt_a.step();

  heft::parallel::module_from_bytes(*b, heft::parallel::module_to_bytes(*a), "model.pt");
  heft::parallel::optimizer_from_bytes(opt_b, heft::parallel::optimizer_to_bytes(opt_a),
                                       "optimizer.pt");
  EXPECT_TRUE(torch::equal(a->weight, b->weight));
  // The same momentum: one more identical step keeps them equal.
  for (auto* m : {&a, &b}) {
    for (auto& p : (*m)->parameters()) p.mutable_grad().reset();
    (*m)->forward(x).sum().backward();
  }
  opt_a.step();
  opt_b.step();
  EXPECT_TRUE(torch::equal(a->weight, b->weight))
      << (a->weight - b->weight).abs().max().item<double>();

  const std::string rng = heft::parallel::rng_to_bytes();
  const torch::Tensor first = torch::randn({8});
  heft::parallel::rng_from_bytes(rng, "rng.pt");
  EXPECT_TRUE(torch::equal(first, torch::randn({8})));
  // The raw form (in-place recovery's, at every step boundary) restores the same draws.
  const std::string raw = heft::parallel::rng_raw();
  const torch::Tensor again = torch::randn({8});
  heft::parallel::rng_from_raw(raw, "the generator");
  EXPECT_TRUE(torch::equal(again, torch::randn({8})));
  try {
    heft::parallel::rng_from_raw(raw.substr(0, 100), "rank 1's generator");
    FAIL() << "a truncated generator state was taken";
  } catch (const heft::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1's generator"), std::string::npos) << e.what();
  }
}

// In-place recovery's copy of a part (copy_part: raw bytes at the boundary) gives back the
// files the checkpoint writes, with the values of the moment it was taken.
TEST_F(CheckpointTest, ACopiedPartGivesBackTheFilesOfTheMomentItWasTaken) {
  namespace sh = heft::parallel::sharded;
  torch::manual_seed(3);
  torch::nn::Linear model(6, 5);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(0.01));
  model->forward(torch::randn({4, 6})).sum().backward();
  opt.step();
  sh::PartTensors part = sh::replica_part(*model, opt, "adamw", 0);
  part.files["replicated.pt"] = {{"ids", torch::arange(7, torch::kLong).reshape({7, 1})},
                                 {"half", torch::randn({3}).to(torch::kBFloat16)}};
  const std::map<std::string, std::string> written = sh::write_part(part);
  const std::string copy = sh::copy_part(part);
  {
    torch::NoGradGuard no_grad;
    model->weight.add_(1.0);  // the next step: the copy keeps what it took
  }
  const std::map<std::string, std::string> back = sh::files_from_copy(copy, "test");
  ASSERT_EQ(back.size(), written.size());
  EXPECT_EQ(back.at("layout.json"), written.at("layout.json"));
  for (const auto& [file, bytes] : written) {
    if (file == "layout.json") continue;
    const auto want = heft::parallel::tensors_from_pickle(bytes, file);
    const auto got = heft::parallel::tensors_from_pickle(back.at(file), file);
    ASSERT_EQ(got.size(), want.size()) << file;
    for (const auto& [name, t] : want) {
      EXPECT_EQ(got.at(name).scalar_type(), t.scalar_type()) << file << " " << name;
      EXPECT_TRUE(torch::equal(got.at(name), t)) << file << " " << name;
    }
  }
  EXPECT_FALSE(torch::equal(heft::parallel::tensors_from_pickle(back.at("unit-00000.pt"), "u").at("param"),
                            model->weight.detach().reshape({-1})));
  try {
    sh::files_from_copy(copy.substr(0, copy.size() - 3), "rank 2's part");
    FAIL() << "a truncated copy was read";
  } catch (const heft::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2's part"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ends inside tensor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sh::files_from_copy("abc", "x"), heft::IoError);
}

}  // namespace

namespace {

TEST_F(CheckpointTest, PartsAreInvisibleUntilCommittedThenEachLoadsItsOwn) {
  CheckpointDirectory ckpt(dir_.string(), 2);
  for (int k = 0; k < 3; ++k) ckpt.save_part(7, k, {{"shard.bin", std::string(100 + k, 'a' + k)}});
  std::ostringstream quiet;
  EXPECT_FALSE(ckpt.load_latest_part(0, quiet).has_value());  // not committed yet
  ckpt.commit(7, 3, "{\"step\":7}");
  for (int k = 0; k < 3; ++k) {
    const auto got = ckpt.load_latest_part(k);
    ASSERT_TRUE(got.has_value()) << k;
    EXPECT_EQ(got->step, 7);
    EXPECT_EQ(got->meta_json, "{\"step\":7}");
    EXPECT_EQ(got->files.at("shard.bin"), std::string(100 + k, 'a' + k));
  }
  EXPECT_FALSE(ckpt.load_latest_part(3, quiet).has_value());
  EXPECT_NE(quiet.str().find("it has 3 parts, not part 3"), std::string::npos) << quiet.str();
}

TEST_F(CheckpointTest, ACommitWithAMissingPartCommitsNothing) {
  CheckpointDirectory ckpt(dir_.string(), 2);
  for (int k = 0; k < 2; ++k) ckpt.save_part(1, k, {{"s", "one"}});
  ckpt.commit(1, 2, "{}");
  ckpt.save_part(2, 0, {{"s", "two"}});  // part 1 of step 2 never arrives
  try {
    ckpt.commit(2, 2, "{}");
    FAIL() << "committed without part 1";
  } catch (const heft::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("part-00001 is missing: not committed"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(ckpt.load_latest_part(0)->step, 1);
  // Cleanup after the next commit: step 2's leftovers go; a later step's part (another
  // writer's work in progress) stays.
  ckpt.save_part(9, 0, {{"s", "in progress"}});
  for (int k = 0; k < 2; ++k) ckpt.save_part(3, k, {{"s", "three"}});
  ckpt.commit(3, 2, "{}");
  EXPECT_FALSE(fs::exists(dir_ / ".tmp-ckpt-000000000002"));
  EXPECT_TRUE(fs::exists(dir_ / ".tmp-ckpt-000000000009" / "part-00000" / "part.json"));
  EXPECT_EQ(ckpt.load_latest_part(1)->files.at("s"), "three");
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(CheckpointTest, LocateLatestPartsChecksEveryPartStreamedAndReturnsPaths) {
  CheckpointDirectory ckpt(dir_.string(), 5);
  const std::string big(3 * (1 << 20) + 5, 'x');  // spans several 1 MiB CRC chunks
  for (int64_t step = 1; step <= 2; ++step) {
    for (int k = 0; k < 2; ++k)
      ckpt.save_part(step, k, {{"big.bin", big}, {"k.txt", std::to_string(step * 10 + k)}});
    ckpt.commit(step, 2, "{\"step\":" + std::to_string(step) + "}");
  }
  ckpt.save(data(3));  // a newer single-writer checkpoint: not a multi-writer one, skipped
  EXPECT_EQ(ckpt.steps(), (std::vector<int64_t>{3, 2, 1}));
  std::ostringstream warnings;
  auto got = ckpt.locate_latest_parts(warnings);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->step, 2);
  EXPECT_EQ(got->meta_json, "{\"step\":2}");
  ASSERT_EQ(got->parts.size(), 2u);
  EXPECT_EQ(file_bytes(got->parts[1].at("k.txt")), "21");
  EXPECT_EQ(file_bytes(got->parts[0].at("big.bin")), big);
  EXPECT_NE(warnings.str().find(step_dir(3)), std::string::npos) << warnings.str();
  // One byte of part 1's big file changed past the first chunk (same size): step 2 is
  // skipped with a warning naming the file, step 1 is found.
  {
    std::fstream f(got->parts[1].at("big.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((1 << 20) + 17);
    f.put('y');
  }
  std::ostringstream again;
  got = ckpt.locate_latest_parts(again);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->step, 1);
  EXPECT_EQ(file_bytes(got->parts[1].at("k.txt")), "11");
  EXPECT_NE(again.str().find("part-00001/big.bin is missing or does not match its size or crc32"),
            std::string::npos) << again.str();
}

// A torch::serialize archive whose class runs TorchScript when unpickled: its __setstate__
// creates `marker` (torch.from_file with shared=True opens the path O_CREAT, read-write).
std::string crafted_archive(const fs::path& marker) {
  torch::jit::Module m("__torch__.Crafted");
  m.register_parameter("weight", torch::zeros({3, 4}), /*is_buffer=*/false);
  m.register_parameter("bias", torch::zeros({3}), /*is_buffer=*/false);
  m.register_buffer("seen", torch::zeros({4}, torch::kUInt8));
  m.define("def __getstate__(self) -> Tuple[Tensor, Tensor]:\n"
           "    return (self.weight, self.bias)\n"
           "def __setstate__(self, state: Tuple[Tensor, Tensor]) -> None:\n"
           "    self.seen = torch.from_file(\"" + marker.string() + "\", True, 4, dtype=0)\n"  // 0: uint8
           "    self.weight = state[0]\n"
           "    self.bias = state[1]\n");
  std::ostringstream out;
  m.save(out);
  return out.str();
}

// `archive` with its record `name` replaced by `bytes` (the other records copied).
std::string with_record(const std::string& archive, const std::string& name, const std::string& bytes) {
  std::istringstream in(archive);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  for (const std::string& record : reader.getAllRecords()) {
    if (record == ".data/serialization_id") continue;  // the writer writes its own
    if (record == name) {
      writer.writeRecord(name, bytes.data(), bytes.size());
    } else {
      auto [data, n] = reader.getRecord(record);
      writer.writeRecord(record, data.get(), n);
    }
  }
  writer.writeEndOfFile();
  return out;
}

// Pickle protocol 2: GLOBAL module.name called with one string (what a Python object's
// __reduce__ returning (os.system, ("touch ...",)) pickles to).
std::string pickled_call(const std::string& module, const std::string& name, const std::string& arg) {
  std::string p = "\x80\x02";
  p += "c" + module + "\n" + name + "\n";
  const uint32_t n = static_cast<uint32_t>(arg.size());
  p += 'X';
  p.append(reinterpret_cast<const char*>(&n), 4);  // little-endian length (x86, aarch64)
  p += arg;
  p += "\x85R.";
  return p;
}

void expect_refused(const std::function<void()>& load, const std::string& expected) {
  try {
    load();
    FAIL() << "loaded; expected: " << expected;
  } catch (const heft::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, ACraftedArchiveWithAValidCrcIsRefusedNamingTheFileAndRunsNothing) {
  fs::create_directories(dir_);
  const fs::path marker = dir_ / "marker";
  const std::string crafted = crafted_archive(marker);
  {  // The probe bites: LibTorch's own loader runs the archive's __setstate__.
    torch::serialize::InputArchive raw;
    raw.load_from(crafted.data(), crafted.size());
    ASSERT_TRUE(fs::exists(marker)) << "torch::jit::load did not run __setstate__: no probe";
    fs::remove(marker);
  }
  torch::nn::Linear model(4, 3);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  CheckpointDirectory ckpt((dir_ / "ckpt").string(), 2);
  CheckpointData d;
  d.step = 1;
  d.files = {{"model.pt", crafted}, {"optimizer.pt", crafted}, {"rng.pt", crafted}};
  ckpt.save(d);  // its manifest lists the crafted files' sizes and CRCs
  std::ostringstream warnings;
  const auto loaded = ckpt.load_latest(warnings);
  ASSERT_TRUE(loaded.has_value()) << warnings.str();  // the CRC check passes
  const std::string where = "checkpoint step 1 in " + ckpt.dir() + ": ";
  const std::string refusal = ": holds something other than tensors and plain data "
                              "(code/__torch__.py defines a TorchScript function); heft "
                              "refuses to load it";
  expect_refused([&] { heft::parallel::module_from_bytes(*model, loaded->files.at("model.pt"), where + "model.pt"); },
                 where + "model.pt" + refusal);
  expect_refused([&] { heft::parallel::optimizer_from_bytes(opt, loaded->files.at("optimizer.pt"), where + "optimizer.pt"); },
                 where + "optimizer.pt" + refusal);
  expect_refused([&] { heft::parallel::rng_from_bytes(loaded->files.at("rng.pt"), where + "rng.pt"); },
                 where + "rng.pt" + refusal);
  // heft-train's sharded checkpoints: each part's shard.pt, before any is unpickled.
  const std::string layout = R"({"format": "heft-sharded", "flats": [], "replicate_rank": 0})";
  expect_refused([&] { heft::parallel::sharded::read_sharded({{{"layout.json", layout}, {"shard.pt", crafted}}}, "step 1 in D"); },
                 "checkpoint step 1 in D: part-00000/shard.pt" + refusal);
  EXPECT_FALSE(fs::exists(marker));

  // A legitimate archive whose data.pkl was replaced: a pickled os.system call (LibTorch's
  // unpickler has no Python to call; the load fails, naming the file) and a registered C++
  // class (refused before unpickling).
  const std::string plain = heft::parallel::module_to_bytes(*model);
  const std::string touch = "touch " + marker.string();
  const std::string system_call = with_record(plain, "data.pkl", pickled_call("posix", "system", touch));
  expect_refused([&] { heft::parallel::module_from_bytes(*model, system_call, where + "model.pt"); },
                 where + "model.pt: cannot be read as a torch::serialize archive");
  const std::string custom = with_record(
      plain, "data.pkl", pickled_call("__torch__.torch.classes.quantized", "LinearPackedParamsBase", touch));
  expect_refused([&] { heft::parallel::module_from_bytes(*model, custom, where + "model.pt"); },
                 where + "model.pt: holds something other than tensors and plain data (data.pkl names "
                 "a registered C++ class (torch.classes)); heft refuses to load it");
  expect_refused([&] { heft::parallel::module_from_bytes(*model, "not a zip", where + "model.pt"); },
                 where + "model.pt: not a torch::serialize archive");
  EXPECT_FALSE(fs::exists(marker));
  // heft's own archives still load.
  heft::parallel::module_from_bytes(*model, plain, where + "model.pt");
}

}  // namespace
