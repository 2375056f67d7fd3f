#include "heft/parallel/torch_state.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>

#include "heft/error.h"

namespace heft::parallel {

namespace {

std::string bytes_of(torch::serialize::OutputArchive& archive) {
  std::ostringstream s;
  archive.save_to(s);
  return s.str();
}

// The zip reader over the caller's bytes (no copy).
class BytesReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min(n, bytes_.size() - static_cast<size_t>(pos));
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// Whether `word` occurs in text as a whole identifier-like token.
bool has_token(std::string_view text, std::string_view word) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !ident(text[at - 1])) && (end == text.size() || !ident(text[end])))
      return true;
  }
  return false;
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Text from the crafted file (a record's name, a global's name in LibTorch's error) for a
// message: bytes outside printable ASCII become '?', cut at kQuoteLimit characters.
constexpr size_t kQuoteLimit = 200;
std::string printable(std::string s) {
  if (s.size() > kQuoteLimit) s = s.substr(0, kQuoteLimit) + "...";
  for (char& c : s)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s;
}

// The first non-empty line of a LibTorch error (c10::Error, or the TorchScript compiler's
// ErrorReport, which starts with a newline), without the backtrace that may follow.
std::string first_line(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::istringstream text(c10 ? c10->what_without_backtrace() : e.what());
  for (std::string line; std::getline(text, line);)
    if (line.find_first_not_of(" \t") != std::string::npos) return printable(line);
  return "no message";
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

[[noreturn]] void refuse(const std::string& what, const std::string& why,
                         const char* verb = "load") {
  throw IoError(what + ": holds something other than tensors and plain data (" + why +
                "); heft refuses to " + verb + " it");
}

// Like Module::load, but copies into the existing tensors rather than swapping their
// storage (Module::load's set_), so that views and references held elsewhere (DDP's
// buckets, the optimizer) see the loaded values.
void copy_from_archive(torch::nn::Module& module, torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters(/*recurse=*/false)) {
    torch::Tensor t;
    archive.read(p.key(), t);
    p.value().copy_(t);
  }
  for (auto& b : module.named_buffers(/*recurse=*/false)) {
    torch::Tensor t;
    archive.read(b.key(), t, /*is_buffer=*/true);
    b.value().copy_(t);
  }
  for (auto& c : module.named_children()) {
    torch::serialize::InputArchive sub;
    archive.read(c.key(), sub);
    copy_from_archive(*c.value(), sub);
  }
}

}  // namespace

namespace {

// The first record of the zip archive `bytes` that makes it more than tensors and plain data,
// named with why ("" when there is none): a pickle naming a registered C++ class
// (torch.classes), and a source file (any, or with `any_source` false only one that defines a
// function: TorchScript's). Reads the source and pickle records, not tensor data; throws what
// LibTorch's zip reader throws for bytes that are no zip archive.
std::string refused_record(const std::string& bytes, bool any_source) {
  caffe2::serialize::PyTorchStreamReader zip(std::make_shared<BytesReader>(bytes));
  for (const std::string& name : zip.getAllRecords()) {
    // LibTorch finds records by name ignoring case (miniz), so the suffixes are too.
    const std::string key = lower(name);
    const bool source = ends_with(key, ".py");
    if (source && any_source) return printable(name) + " is a source file";
    if (!source && !ends_with(key, "pkl")) continue;  // tensor data, version, extra files
    auto [data, size] = zip.getRecord(name);
    const std::string_view text(static_cast<const char*>(data.get()), size);
    if (source && has_token(text, "def")) return printable(name) + " defines a TorchScript function";
    if (!source && text.find("torch.classes") != std::string_view::npos)
      return printable(name) + " names a registered C++ class (torch.classes)";
  }
  return "";
}

}  // namespace

void check_plain_archive(const std::string& bytes, const std::string& what) {
  std::string refused;  // the record and why, set inside the try, thrown outside it
  try {
    refused = refused_record(bytes, /*any_source=*/false);
  } catch (const std::exception& e) {
    throw IoError(what + ": not a torch::serialize archive (" + first_line(e) + ")");
  }
  if (!refused.empty()) refuse(what, refused);
}

void load_plain_archive(torch::serialize::InputArchive& archive, const std::string& bytes,
                        const std::string& what) {
  check_plain_archive(bytes, what);
  try {
    archive.load_from(bytes.data(), bytes.size());
  } catch (const std::exception& e) {  // c10::Error, the TorchScript importer's ErrorReport
    throw IoError(what + ": cannot be read as a torch::serialize archive (" + first_line(e) + ")");
  }
}

std::string tensors_to_pickle(const std::map<std::string, torch::Tensor>& tensors) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.contiguous());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  return {bytes.begin(), bytes.end()};
}

std::map<std::string, torch::Tensor> tensors_from_pickle(const std::string& bytes,
                                                         const std::string& what) {
  std::string refused;
  try {
    refused = refused_record(bytes, /*any_source=*/true);
  } catch (const std::exception& e) {
    refused = "not a zip archive: " + first_line(e);
  }
  if (!refused.empty()) refuse(what, refused, "unpickle");
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {  // an unknown global: a class, a function
    refuse(what, first_line(e), "unpickle");
  }
  if (!value.isGenericDict()) refuse(what, "a " + value.tagKind() + ", not a dictionary", "unpickle");
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor())
      refuse(what, "a dictionary entry other than name -> tensor", "unpickle");
    out[item.key().toStringRef()] = item.value().toTensor();
  }
  return out;
}

std::string module_to_bytes(const torch::nn::Module& module) {
  torch::serialize::OutputArchive archive;
  module.save(archive);
  return bytes_of(archive);
}

void module_from_bytes(torch::nn::Module& module, const std::string& bytes, const std::string& what) {
  torch::serialize::InputArchive archive;
  load_plain_archive(archive, bytes, what);
  copy_from_archive(module, archive);
}

std::string optimizer_to_bytes(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  return bytes_of(archive);
}

void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes,
                          const std::string& what) {
  torch::serialize::InputArchive archive;
  load_plain_archive(archive, bytes, what);
  optimizer.load(archive);
}

std::string rng_to_bytes() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  torch::serialize::OutputArchive archive;
  archive.write("cpu", state);
  return bytes_of(archive);
}

void rng_from_bytes(const std::string& bytes, const std::string& what) {
  torch::serialize::InputArchive archive;
  load_plain_archive(archive, bytes, what);
  torch::Tensor state;
  archive.read("cpu", state);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

std::string rng_raw() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  state = state.contiguous();
  return {static_cast<const char*>(state.data_ptr()), state.nbytes()};
}

void rng_from_raw(const std::string& bytes, const std::string& what) {
  torch::Tensor state = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state);
  } catch (const c10::Error& e) {
    throw IoError(what + ": not a CPU generator's state (" + std::to_string(bytes.size()) + " bytes): " +
                  e.what_without_backtrace());
  }
}

}  // namespace heft::parallel
