// The process group of heft's torch.distributed backend (process_group.h): the collectives
// staged (staging.h) onto heft's communicator, and the completion of their operations.
#include "process_group.h"

#include <torch/csrc/utils/pybind.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>

#include "heft/comm/knobs.h"
#include "heft/contract/worker.h"
#include "heft/host/host.h"
#include "operation.h"
#include "staging.h"
#include "store_adapter.h"

namespace heft::torch_backend {

namespace {

// The live groups, for shut_down_all() at interpreter exit.
std::mutex& live_mu() {
  static auto* mu = new std::mutex();  // never destroyed: used at exit
  return *mu;
}
std::set<ProcessGroupHeft*>& live_groups() {
  static auto* groups = new std::set<ProcessGroupHeft*>();  // never destroyed: used at exit
  return *groups;
}

}  // namespace

namespace {

// One Work over several (the coalesced forms, endCoalescing): waits for each in order;
// its future completes when all of theirs have.
class AllOfWork : public c10d::Work {
 public:
  AllOfWork(std::vector<c10::intrusive_ptr<c10d::Work>> works, c10d::OpType type)
      : c10d::Work(-1, type), works_(std::move(works)) {}
  bool isCompleted() override {
    for (auto& w : works_)
      if (!w->isCompleted()) return false;
    return true;
  }
  bool isSuccess() const override {
    for (auto& w : works_)
      if (!w->isSuccess()) return false;
    return true;
  }
  std::exception_ptr exception() const override {
    for (auto& w : works_)
      if (auto e = w->exception()) return e;
    return nullptr;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& w : works_) w->wait(timeout);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(
        c10::FutureType::create(c10::AnyType::get()));
    for (auto& w : works_) futures.push_back(w->getFuture());
    return c10::collectAll(futures);
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

c10::intrusive_ptr<c10d::Work> all_of(std::vector<c10::intrusive_ptr<c10d::Work>> works,
                                      c10d::OpType type) {
  return c10::make_intrusive<AllOfWork>(std::move(works), type);
}

// Collectives that go point to point use tags above every user tag.
constexpr uint32_t kCollectiveTag = 0xFFFFFFF0u;

uint32_t user_tag(int tag) {
  TORCH_CHECK(tag >= 0 && static_cast<uint32_t>(tag) < kCollectiveTag, "heft send/recv: tag ",
              tag, " out of range (0 to ", kCollectiveTag - 1, ")");
  return static_cast<uint32_t>(tag);
}

void one_tensor(const std::vector<at::Tensor>& ts, const char* op) {
  TORCH_CHECK(ts.size() == 1, "heft ", op, ": expected one tensor per call (one device), found ",
              ts.size());
}

void check_root(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "heft ", op, ": root rank ", root,
              " is outside the group of ", size);
}

void check_peer(int peer, int rank, int size, const char* op) {
  TORCH_CHECK(peer >= 0 && peer < size && peer != rank, "heft ", op, ": peer rank ", peer,
              " is not another rank of the group of ", size);
}

void same_shapes(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* op) {
  for (const at::Tensor& t : list)
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(), "heft ", op,
                ": every tensor of the list must have the size and dtype of ", like.sizes(),
                " ", dtype_name(like.scalar_type()), ", found ", t.sizes(), " ",
                dtype_name(t.scalar_type()));
}

using C = comm::Communicator;

constexpr void (C::*kAllreduce)(const void*, void*, size_t, comm::DataType, comm::ReduceOp,
                                comm::Compression) = &C::allreduce;
constexpr comm::Compression kNoCompression = comm::Compression::kDefault;

// How long the completion thread lets a deferred operation wait for its caller (between one
// and two ticks), and how many ticks without one before it stops looking.
constexpr std::chrono::microseconds kTick{2000};
constexpr int kIdleTicks = 50;

// Where this rank's links listen when HEFT_BIND_ADDRESS does not say: this host's address
// toward the store's host (heft's job store, HEFT_STORE, else torch's, MASTER_ADDR), where the
// ranks of other hosts reach it, as comm::init() takes its store connection's address; the
// loopback address when every rank is on this host (the store is local) or neither is known.
std::string link_address() {
  std::string host = contract::HeftVariables::from_process().store.value_or("");
  host = host.substr(0, host.rfind(':'));
  if (host.empty()) {
    const char* master = std::getenv("MASTER_ADDR");
    host = master ? master : "";
  }
  const std::string address = host.empty() ? "" : host::address_toward(host);
  return address.empty() ? "127.0.0.1" : address;
}

}  // namespace

ProcessGroupHeft::ProcessGroupHeft(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      completions_(std::make_shared<Completions>()),
      deferred_(std::make_shared<Deferred>()) {
  store_ = std::make_shared<FromC10dStore>(store);
  store_->set_timeout(timeout);
  // A name and a token for this group's links, the same on its ranks: the job's token
  // under heft run, else one the group's rank 0 draws and publishes in the group's store.
  std::string token = contract::HeftVariables::from_process().token.value_or("");
  if (rank == 0) {
    std::random_device rd;
    char id[33];
    std::snprintf(id, sizeof(id), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    store_->set("heft/group", std::string(id));
  }
  const std::string id = store_->get_string("heft/group");
  if (token.empty()) token = id;
  // Tuning variables (HEFT_HOST, HEFT_TRANSPORT, HEFT_ALLREDUCE_ALGO, ...) as for any
  // heft worker; the group's token and timeout are torch's.
  comm::CommunicatorOptions options = comm::CommunicatorOptions::from_env();
  if (!comm::knob_value("HEFT_BIND_ADDRESS")) options.bind_address = link_address();
  options.token = token;
  options.timeout = timeout;
  comm_ = comm::Communicator::create(store_, "torch-" + id, rank, size, options);
  deferred_->comm = comm_.get();
  const char* direct = std::getenv("HEFT_TORCH_DIRECT_FUTURES");
  deferred_->direct = !(direct && std::string(direct) == "0");
  deferred_->issue_async = [this](const std::shared_ptr<Operation>& op) { issue_async(op); };
  thread_ = std::thread([this] { complete_loop(); });
  std::lock_guard<std::mutex> lock(live_mu());
  live_groups().insert(this);
}

ProcessGroupHeft::~ProcessGroupHeft() {
  // The GIL goes first: a shut_down_all() under way may wait for it (see shut_down()).
  std::unique_ptr<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil = std::make_unique<pybind11::gil_scoped_release>();
  {
    std::lock_guard<std::mutex> lock(live_mu());  // waits for a shut_down_all() under way
    live_groups().erase(this);
  }
  shut_down();
  pending_.clear();
  retired_.clear();
}

void ProcessGroupHeft::shut_down() {
  // Destroyed from Python (the GIL held) or from C++: the threads joined below may need
  // the GIL to drop the last reference to a Python-owned tensor, so let go of it.
  std::unique_ptr<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil = std::make_unique<pybind11::gil_scoped_release>();
  std::lock_guard<std::mutex> once(shut_down_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  std::shared_ptr<Operation> last;
  {
    // No operation left deferred, no waiter still running one, none taken later.
    std::unique_lock<std::mutex> lock(deferred_->mu);
    if (comm_) last = deferred_->flush_locked();
    deferred_->idle.wait(lock, [&] { return deferred_->running == 0; });
    deferred_->comm = nullptr;
    deferred_->issue_async = nullptr;
  }
  last.reset();
  comm_.reset();  // finishes queued operations, which hand theirs to the completion thread
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int ProcessGroupHeft::shut_down_all() {
  std::lock_guard<std::mutex> lock(live_mu());
  int n = 0;
  for (ProcessGroupHeft* group : live_groups()) {
    std::lock_guard<std::mutex> once(group->shut_down_mu_);
    if (!group->shut_down_) ++n;
  }
  for (ProcessGroupHeft* group : live_groups()) group->shut_down();
  return n;
}

std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> ProcessGroupHeft::completions() const {
  return {completions_->by_waiter.load(), completions_->by_thread.load(),
          completions_->on_caller.load(), completions_->direct.load(),
          completions_->at_once.load()};
}

int64_t ProcessGroupHeft::reused_operations() const {
  return deferred_->reused.load(std::memory_order_relaxed);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  one_tensor(tensors, "broadcast");
  check_root(opts.rootRank, getSize(), "broadcast");
  auto s = std::make_shared<Staged>(stage(tensors[0], "broadcast"));
  return submit(c10d::OpType::BROADCAST, call<&C::broadcast, &C::broadcast_async>(s->data(), s->count(), s->type, static_cast<int>(opts.rootRank)),
                [s] { s->finish(); }, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  one_tensor(tensors, "allreduce");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "allreduce", tensors[0].scalar_type());
  // The common call (dist.all_reduce, DDP's buckets): staged into a reused operation, whose
  // calls capture only the operation itself: nothing allocated per call.
  std::shared_ptr<Operation> o = deferred_->acquire();
  o->staged = stage(tensors[0], "allreduce");
  o->reduce = op;
  Operation* raw = o.get();  // the calls live in the operation: it outlives them
  o->issue = [raw](C& c, bool blocking) -> std::shared_ptr<comm::Work> {
    const Staged& s = raw->staged;
    if (!blocking)
      return c.allreduce_async(s.data(), s.data(), s.count(), s.type, raw->reduce, kNoCompression);
    c.allreduce(s.data(), s.data(), s.count(), s.type, raw->reduce, kNoCompression);
    return nullptr;
  };
  o->finish = [raw] { raw->staged.finish(); };
  o->outputs.assign(tensors.begin(), tensors.end());  // the reused vector's capacity
  return submit_operation(c10d::OpType::ALLREDUCE, std::move(o));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  auto f = std::make_shared<Flat>(flatten(tensors, "allreduce_coalesced", true));
  const comm::ReduceOp op =
      reduce_op(opts.reduceOp, "allreduce_coalesced", tensors[0].scalar_type());
  const size_t n = static_cast<size_t>(f->buf.numel());
  return submit(c10d::OpType::ALLREDUCE_COALESCED,
                call<kAllreduce, &C::allreduce_async>(f->buf.data_ptr(), f->buf.data_ptr(), n, f->type, op, kNoCompression),
                [f] { unflatten(*f); }, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  one_tensor(tensors, "reduce");
  check_root(opts.rootRank, getSize(), "reduce");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "reduce", tensors[0].scalar_type());
  auto s = std::make_shared<Staged>(stage(tensors[0], "reduce"));
  const int root = static_cast<int>(opts.rootRank);
  auto out = std::make_shared<at::Tensor>(getRank() == root ? at::empty_like(s->buf) : at::Tensor());
  return submit(c10d::OpType::REDUCE,
                call<&C::reduce, &C::reduce_async>(s->data(), out->defined() ? out->data_ptr() : nullptr,
                                     s->count(), s->type, op, root),
                [s, out] {
                  if (!out->defined()) return;
                  s->buf.copy_(*out);
                  s->finish();
                },
                tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  one_tensor(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "heft allgather: expected one list of ", getSize(), " output tensors");
  same_shapes(outputs[0], inputs[0], "allgather");
  auto s = std::make_shared<Staged>(stage(inputs[0], "allgather"));
  auto f = std::make_shared<Flat>(flatten(outputs[0], "allgather", false));
  return submit(c10d::OpType::ALLGATHER,
                call<&C::allgather, &C::allgather_async>(s->data(), f->buf.data_ptr(), s->count(), s->type),
                [s, f] { unflatten(*f); }, outputs[0]);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  TORCH_CHECK(output.numel() == input.numel() * getSize(), "heft _allgather_base: output has ",
              output.numel(), " elements, expected ", input.numel() * getSize(),
              " (input x world size)");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "heft _allgather_base: dtypes differ");
  auto s = std::make_shared<Staged>(stage(input, "_allgather_base"));
  auto o = std::make_shared<Staged>(stage(output, "_allgather_base", false));
  return submit(c10d::OpType::_ALLGATHER_BASE,
                call<&C::allgather, &C::allgather_async>(s->data(), o->data(), s->count(), s->type),
                [s, o] { o->finish(); }, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(output_lists.size() == static_cast<size_t>(getSize()),
              "heft allgather_coalesced: expected ", getSize(), " output lists, found ",
              output_lists.size());
  // Each rank's inputs flattened into one block; the blocks gathered; each block split
  // into that rank's output list.
  auto in = std::make_shared<Flat>(flatten(inputs, "allgather_coalesced", true));
  std::vector<at::Tensor> all;
  for (auto& list : output_lists) {
    TORCH_CHECK(list.size() == inputs.size(), "heft allgather_coalesced: an output list of ",
                list.size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < list.size(); ++i)
      TORCH_CHECK(list[i].numel() == inputs[i].numel(),
                  "heft allgather_coalesced: output and input sizes differ");
    all.insert(all.end(), list.begin(), list.end());
  }
  auto out = std::make_shared<Flat>(flatten(all, "allgather_coalesced", false));
  return submit(c10d::OpType::ALLGATHER_COALESCED,
                call<&C::allgather, &C::allgather_async>(in->buf.data_ptr(), out->buf.data_ptr(),
                                        static_cast<size_t>(in->buf.numel()), in->type),
                [in, out] { unflatten(*out); }, all);
}

// gather and scatter go point to point: only the root talks to each rank.
c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  one_tensor(inputs, "gather");
  check_root(opts.rootRank, getSize(), "gather");
  const int root = static_cast<int>(opts.rootRank);
  auto s = std::make_shared<Staged>(stage(inputs[0], "gather"));
  if (getRank() != root) {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "heft gather: only the root passes output tensors");
    return submit(c10d::OpType::GATHER,
                  call<&C::exchange, &C::exchange_async>(std::vector<comm::P2POp>{comm::P2POp::send(s->data(), s->count(), s->type, root, kCollectiveTag)}),
                  [s] {}, {});
  }
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "heft gather: expected one list of ", getSize(), " output tensors on the root");
  same_shapes(outputs[0], inputs[0], "gather");
  auto outs = std::make_shared<std::vector<Staged>>();
  std::vector<comm::P2POp> ops;
  for (int r = 0; r < getSize(); ++r) {
    outs->push_back(stage(outputs[0][static_cast<size_t>(r)], "gather", false));
    if (r != root)
      ops.push_back(comm::P2POp::recv(outs->back().data(), outs->back().count(), outs->back().type, r, kCollectiveTag));
  }
  (*outs)[static_cast<size_t>(root)].buf.copy_(s->buf);
  return submit(c10d::OpType::GATHER, call<&C::exchange, &C::exchange_async>(std::move(ops)),
                [outs, s] {
                  for (const Staged& o : *outs) o.finish();
                },
                outputs[0]);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  one_tensor(outputs, "scatter");
  check_root(opts.rootRank, getSize(), "scatter");
  const int root = static_cast<int>(opts.rootRank);
  auto out = std::make_shared<Staged>(stage(outputs[0], "scatter", false));
  if (getRank() != root) {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                "heft scatter: only the root passes input tensors");
    return submit(c10d::OpType::SCATTER,
                  call<&C::exchange, &C::exchange_async>(std::vector<comm::P2POp>{comm::P2POp::recv(out->data(), out->count(), out->type, root, kCollectiveTag)}),
                  [out] { out->finish(); }, outputs);
  }
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "heft scatter: expected one list of ", getSize(), " input tensors on the root");
  same_shapes(inputs[0], outputs[0], "scatter");
  auto ins = std::make_shared<std::vector<Staged>>();
  std::vector<comm::P2POp> ops;
  for (int r = 0; r < getSize(); ++r) {
    ins->push_back(stage(inputs[0][static_cast<size_t>(r)], "scatter"));
    if (r != root)
      ops.push_back(comm::P2POp::send(ins->back().data(), ins->back().count(), ins->back().type, r, kCollectiveTag));
  }
  out->buf.copy_((*ins)[static_cast<size_t>(root)].buf);
  return submit(c10d::OpType::SCATTER, call<&C::exchange, &C::exchange_async>(std::move(ops)),
                [out, ins] { out->finish(); }, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  one_tensor(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "heft reduce_scatter: expected one list of ", getSize(), " input tensors");
  same_shapes(inputs[0], outputs[0], "reduce_scatter");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter", outputs[0].scalar_type());
  auto in = std::make_shared<Flat>(flatten(inputs[0], "reduce_scatter", true));
  auto out = std::make_shared<Staged>(stage(outputs[0], "reduce_scatter", false));
  return submit(c10d::OpType::REDUCE_SCATTER,
                call<&C::reduce_scatter, &C::reduce_scatter_async>(in->buf.data_ptr(), out->data(), out->count(), in->type, op),
                [in, out] { out->finish(); }, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(input.numel() == output.numel() * getSize(), "heft _reduce_scatter_base: input has ",
              input.numel(), " elements, expected ", output.numel() * getSize(),
              " (output x world size)");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "heft _reduce_scatter_base: dtypes differ");
  const comm::ReduceOp op = reduce_op(opts.reduceOp, "_reduce_scatter_base", input.scalar_type());
  auto in = std::make_shared<Staged>(stage(input, "_reduce_scatter_base"));
  auto out = std::make_shared<Staged>(stage(output, "_reduce_scatter_base", false));
  return submit(c10d::OpType::_REDUCE_SCATTER_BASE,
                call<&C::reduce_scatter, &C::reduce_scatter_async>(in->data(), out->data(), out->count(), in->type, op),
                [in, out] { out->finish(); }, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "heft alltoall_base: dtypes differ");
  auto in = std::make_shared<Staged>(stage(input, "alltoall_base"));
  auto out = std::make_shared<Staged>(stage(output, "alltoall_base", false));
  if (output_splits.empty() && input_splits.empty()) {  // equal blocks
    TORCH_CHECK(input.numel() == output.numel() && input.numel() % n == 0,
                "heft alltoall_base: input and output must have the same size, divisible by ",
                n, " (found ", input.numel(), " and ", output.numel(), ")");
    return submit(c10d::OpType::ALLTOALL_BASE,
                  call<&C::alltoall, &C::alltoall_async>(in->data(), out->data(), in->count() / static_cast<size_t>(n), in->type),
                  [in, out] { out->finish(); }, {output});
  }
  // Uneven splits (along dim 0): one batched exchange with every peer.
  const int64_t in_row = input.dim() > 0 && input.size(0) > 0 ? input.numel() / input.size(0) : 1;
  const int64_t out_row = output.dim() > 0 && output.size(0) > 0 ? output.numel() / output.size(0) : 1;
  auto splits = [&](std::vector<int64_t> s, const at::Tensor& t, const char* which) {
    if (s.empty()) s.assign(static_cast<size_t>(n), t.size(0) / n);
    TORCH_CHECK(static_cast<int>(s.size()) == n, "heft alltoall_base: ", which, " has ", s.size(),
                " entries, expected ", n);
    return s;
  };
  const std::vector<int64_t> os = splits(output_splits, output, "output_split_sizes");
  const std::vector<int64_t> is = splits(input_splits, input, "input_split_sizes");
  std::vector<comm::P2POp> ops;
  const size_t esize = in->buf.element_size();
  int64_t io = 0, oo = 0;
  for (int r = 0; r < n; ++r) {
    const size_t icount = static_cast<size_t>(is[static_cast<size_t>(r)] * in_row);
    const size_t ocount = static_cast<size_t>(os[static_cast<size_t>(r)] * out_row);
    char* ip = static_cast<char*>(in->data()) + static_cast<size_t>(io) * esize;
    char* op = static_cast<char*>(out->data()) + static_cast<size_t>(oo) * esize;
    if (r == getRank()) {
      TORCH_CHECK(icount == ocount, "heft alltoall_base: this rank's own block differs in size");
      std::memcpy(op, ip, icount * esize);
    } else {
      ops.push_back(comm::P2POp::send(ip, icount, in->type, r, kCollectiveTag));
      ops.push_back(comm::P2POp::recv(op, ocount, out->type, r, kCollectiveTag));
    }
    io += static_cast<int64_t>(icount);
    oo += static_cast<int64_t>(ocount);
  }
  return submit(c10d::OpType::ALLTOALL_BASE, call<&C::exchange, &C::exchange_async>(std::move(ops)),
                [in, out] { out->finish(); }, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
              "heft alltoall: expected ", n, " input and output tensors");
  auto ins = std::make_shared<std::vector<Staged>>();
  auto outs = std::make_shared<std::vector<Staged>>();
  std::vector<comm::P2POp> ops;
  for (int r = 0; r < n; ++r) {
    ins->push_back(stage(inputs[static_cast<size_t>(r)], "alltoall"));
    outs->push_back(stage(outputs[static_cast<size_t>(r)], "alltoall", false));
    if (r == getRank()) {
      TORCH_CHECK(ins->back().count() == outs->back().count(),
                  "heft alltoall: this rank's own input and output differ in size");
      outs->back().buf.copy_(ins->back().buf);
    } else {
      ops.push_back(comm::P2POp::send(ins->back().data(), ins->back().count(), ins->back().type, r, kCollectiveTag));
      ops.push_back(comm::P2POp::recv(outs->back().data(), outs->back().count(), outs->back().type, r, kCollectiveTag));
    }
  }
  return submit(c10d::OpType::ALLTOALL, call<&C::exchange, &C::exchange_async>(std::move(ops)),
                [ins, outs] {
                  for (const Staged& o : *outs) o.finish();
                },
                outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::barrier(const c10d::BarrierOptions&) {
  return submit(c10d::OpType::BARRIER, call<&C::barrier, &C::barrier_async>(), [] {}, {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::send(std::vector<at::Tensor>& tensors, int dst,
                                                      int tag) {
  one_tensor(tensors, "send");
  check_peer(dst, getRank(), getSize(), "send");
  auto s = std::make_shared<Staged>(stage(tensors[0], "send"));
  return submit(c10d::OpType::SEND,
                call<&C::exchange, &C::exchange_async>(std::vector<comm::P2POp>{comm::P2POp::send(s->data(), s->count(), s->type, dst, user_tag(tag))}),
                [s] {}, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::recv(std::vector<at::Tensor>& tensors, int src,
                                                      int tag) {
  one_tensor(tensors, "recv");
  check_peer(src, getRank(), getSize(), "recv");
  auto s = std::make_shared<Staged>(stage(tensors[0], "recv", false));
  return submit(c10d::OpType::RECV,
                call<&C::exchange, &C::exchange_async>(std::vector<comm::P2POp>{comm::P2POp::recv(s->data(), s->count(), s->type, src, user_tag(tag))}),
                [s] { s->finish(); }, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "heft recv: a source rank is required (recv from any source is not supported)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "heft allgather_into_tensor_coalesced: ",
              outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i) works.push_back(_allgather_base(outputs[i], inputs[i], opts));
  return all_of(std::move(works), c10d::OpType::COALESCED);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "heft reduce_scatter_tensor_coalesced: ",
              outputs.size(), " outputs for ", inputs.size(), " inputs");
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < inputs.size(); ++i)
    works.push_back(_reduce_scatter_base(outputs[i], inputs[i], opts));
  return all_of(std::move(works), c10d::OpType::COALESCED);
}

void ProcessGroupHeft::startCoalescing() {
  TORCH_CHECK(!coalescing_, "heft startCoalescing: already coalescing (nested coalescing managers)");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::endCoalescing() {
  TORCH_CHECK(coalescing_, "heft endCoalescing: startCoalescing was not called");
  coalescing_ = false;
  return all_of(std::move(coalesced_), c10d::OpType::COALESCED);
}

c10::intrusive_ptr<ProcessGroupHeft> backend_of(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  TORCH_CHECK(group, "heft: expected a process group, found None");
  c10::intrusive_ptr<c10d::Backend> b = group->getBackend(c10::DeviceType::CPU);
  auto heft = c10::dynamic_intrusive_pointer_cast<ProcessGroupHeft>(b);
  TORCH_CHECK(heft, "heft: the process group's CPU backend is ", b ? b->getBackendName() : "none",
              ", expected heft (init_process_group(backend=\"heft\") or new_group(backend=\"heft\"))");
  return heft;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::submit(c10d::OpType type, Issue issue,
                                                        std::function<void()> finish,
                                                        std::vector<at::Tensor> outputs) {
  std::shared_ptr<Operation> op = deferred_->acquire();
  op->issue = std::move(issue);
  op->finish = std::move(finish);
  op->outputs = std::move(outputs);
  return submit_operation(type, std::move(op));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHeft::submit_operation(c10d::OpType type,
                                                                  std::shared_ptr<Operation> op) {
  live_comm();  // a RuntimeError after shut_down()
  ++operations_;
  std::shared_ptr<Operation> before;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(deferred_->mu);
    TORCH_CHECK(deferred_->comm, "heft process group: used after it was shut down");
    before = deferred_->flush_locked();
    if (before) deferred_->immediate = Deferred::kImmediateOps;  // its caller did not wait
    if (deferred_->immediate > 0) {
      --deferred_->immediate;
      ++completions_->at_once;
      issue_async(op);
    } else {
      deferred_->op = op;
      ++deferred_->seq;
      if (!ticking_.load(std::memory_order_relaxed)) {
        std::lock_guard<std::mutex> ticks(mu_);
        wake = !ticking_;
        ticking_ = true;
      }
    }
  }
  if (wake) cv_.notify_one();
  auto work = c10::make_intrusive<HeftWork>(std::move(op), type, deferred_, completions_);
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

void ProcessGroupHeft::issue_async(const std::shared_ptr<Operation>& op) {
  try {
    op->work = op->issue(*live_comm(), false);
  } catch (const std::exception& e) {
    op->fail(backend_error(e));
    return;
  }
  // Runs on the communicator's thread, which must never drop the last reference to an
  // operation: its tensors may be Python's, and releasing one takes the GIL, which would
  // stall every collective behind it (or deadlock with a thread that holds the GIL and
  // waits for one). The completion thread drops them.
  op->work->on_finish([this, op] {
    // A C++ future (DDP's) completes here, its waiter woken without a hand-off; its
    // operation is still dropped on the completion thread (retired_).
    if (op->direct && !op->waiter) op->complete(completions_->direct);
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (op->waiter || op->claimed) {
        retired_.push_back(op);
        wake = retired_.size() >= kRetiredBatch;
      } else {
        pending_.push_back(op);
        wake = true;
      }
    }
    if (wake) cv_.notify_one();
  });
}

// Completes the operations the communicator hands over (those with no waiter when they
// finished), so futures that nobody waits on (DDP's, comm hooks') complete; drops the
// operations a waiter completed, in batches (retired_); and, while operations are being
// deferred, looks at the deferred one every tick: one deferred since the last tick is issued.
void ProcessGroupHeft::complete_loop() {
  uint64_t seen = 0;  // the deferral seen at the last tick
  int idle_ticks = 0;
  auto next_tick = std::chrono::steady_clock::now() + kTick;
  for (;;) {
    std::shared_ptr<Operation> op;
    std::vector<std::shared_ptr<Operation>> retired;
    bool tick = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stopping_ || !pending_.empty() || retired_.size() >= kRetiredBatch;
      };
      if (!ticking_) {
        cv_.wait(lock, [&] { return ready() || ticking_; });
        next_tick = std::chrono::steady_clock::now() + kTick;
        idle_ticks = 0;
      } else if (!cv_.wait_until(lock, next_tick, ready)) {
        tick = true;
        next_tick = std::chrono::steady_clock::now() + kTick;
      }
      retired.swap(retired_);
      if (!pending_.empty()) {
        op = std::move(pending_.front());
        pending_.pop_front();
      } else if (stopping_) {
        return;
      }
    }
    retired.clear();
    if (op) op->complete(completions_->by_thread);
    op.reset();
    if (tick) look_at_deferred(seen, idle_ticks);
  }
}

// One tick: issues the deferred operation if it is the one seen at the last tick; stops the
// ticks after kIdleTicks without one.
void ProcessGroupHeft::look_at_deferred(uint64_t& seen, int& idle_ticks) {
  std::shared_ptr<Operation> stale;
  std::lock_guard<std::mutex> lock(deferred_->mu);
  if (deferred_->op) {
    idle_ticks = 0;
    if (deferred_->seq == seen && deferred_->comm) {
      stale = deferred_->flush_locked();
      deferred_->immediate = Deferred::kImmediateOpsAfterTick;  // its caller did not wait
    }
  } else if (++idle_ticks >= kIdleTicks) {
    std::lock_guard<std::mutex> ticks(mu_);
    ticking_ = false;  // the next submit wakes this thread again
  }
  seen = deferred_->seq;
}

}  // namespace heft::torch_backend
