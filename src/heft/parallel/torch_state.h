// LibTorch state as checkpoint blobs: a module, an optimizer and torch's default CPU
// generator to bytes and back, for the files of a CheckpointDirectory (checkpoint_dir.h,
// the on-disk format, which knows nothing of LibTorch). The bytes are torch::serialize
// archives; rng's holds the generator state as a uint8 tensor under the key "cpu".
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

namespace heft::parallel {

// The load functions read archives of tensors and plain values only (what the *_to_bytes
// functions write; check_plain_archive runs first) and throw heft::IoError naming `what`,
// the file ("checkpoint step 3 in DIR: model.pt"), for a refused or unreadable archive.
std::string module_to_bytes(const torch::nn::Module& module);
// Copies into the module's existing tensors (views and references held elsewhere, such as
// DDP's buckets or the optimizer, see the loaded values).
void module_from_bytes(torch::nn::Module& module, const std::string& bytes, const std::string& what);
std::string optimizer_to_bytes(const torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes,
                          const std::string& what);
// torch's default CPU generator (torch::manual_seed, dropout, randn, ...).
std::string rng_to_bytes();
void rng_from_bytes(const std::string& bytes, const std::string& what);
// The same generator's state as its raw bytes (a memcpy, no archive: in-place recovery takes
// one at every step boundary); heft::IoError naming `what` for bytes the generator refuses.
std::string rng_raw();
void rng_from_raw(const std::string& bytes, const std::string& what);

// A torch::serialize archive is a TorchScript zip: LibTorch's loader (torch::jit::load)
// compiles the source under code/ and runs a class's __setstate__ while unpickling
// data.pkl, so a crafted file would run TorchScript, which can create and write files
// (torch.from_file); a CRC only finds corruption. heft's archives hold classes with
// attributes and no methods. Throws heft::IoError naming `what` and the record when a
// source file defines a function (the token def) or a pickle names a registered C++ class
// (torch.classes, whose __setstate__ heft never needs), or when the bytes are no archive.
// Compiles and unpickles nothing; reads the source and pickle records, not tensor data.
void check_plain_archive(const std::string& bytes, const std::string& what);
// check_plain_archive, then archive.load_from(bytes); a LibTorch error while loading
// becomes heft::IoError naming `what`.
void load_plain_archive(torch::serialize::InputArchive& archive, const std::string& bytes,
                        const std::string& what);

// A dictionary of tensors by name as the bytes of a torch.save-compatible file
// (torch::pickle_save: Python's torch.load(weights_only=True) reads it).
std::string tensors_to_pickle(const std::map<std::string, torch::Tensor>& tensors);
// The dictionary back from such a file, whoever wrote it (C++ or Python's torch.save), read
// by LibTorch's unpickler, which runs no Python: a file that is no zip archive, whose
// data.pkl names a registered C++ class (torch.classes), that holds a source file, or whose
// unpickling meets any global other than torch's tensor rebuilders, or whose value is not a
// dictionary of tensors by string, is refused with heft::IoError "what: holds something
// other than tensors and plain data (...); heft refuses to unpickle it".
std::map<std::string, torch::Tensor> tensors_from_pickle(const std::string& bytes,
                                                         const std::string& what);

}  // namespace heft::parallel
