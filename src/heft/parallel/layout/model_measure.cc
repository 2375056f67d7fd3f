#include "heft/parallel/layout/model_measure.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <ctime>

#include "heft/error.h"
#include "heft/host/host.h"

namespace heft::parallel::layout {

int64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

int64_t peak_resident_bytes() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // KiB on Linux
}

namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// What layer `i` reads: a copy of x for a floating x (a layer working in place may write it),
// requiring grad unless it is the first layer's and the batch does not.
torch::Tensor layer_input(const MeasuredModel& model, int i, const torch::Tensor& x) {
  if (!x.is_floating_point()) return x;
  return x.detach().requires_grad_(i > 0 || model.input_requires_grad).clone();
}

// Layer i's forward and backward seconds on x (the options' rounds, medians) and its output's
// bytes.
parallel::pipeline::LayerCost time_layer(const MeasuredModel& model, int i, const torch::Tensor& x,
                                         const parallel::pipeline::ProfileOptions& options) {
  std::vector<parallel::pipeline::LayerCost> one(1);
  int64_t output_bytes = 0;
  parallel::pipeline::profile_layers(one, options, [&](int, double* forward_s, double* backward_s) {
    const torch::Tensor in = layer_input(model, i, x);
    const double t0 = cpu_seconds();
    const torch::Tensor y = model.forward(i, in);
    const double t1 = cpu_seconds();
    if (y.requires_grad()) y.backward(torch::ones_like(y));
    *forward_s = t1 - t0;
    *backward_s = cpu_seconds() - t1;
    output_bytes = bytes_of(y);
  });
  one[0].activation_bytes = output_bytes;
  return one[0];
}

void trim(const LayerMeasureOptions& o) {
  if (o.trim) ::malloc_trim(0);
}

// Three whole training steps of the chain (LayerMeasureOptions::step_probe): the resident
// set's peak over its size before them (0 where the kernel cannot reset the peak). The
// parameters are put back and their gradients dropped afterwards.
int64_t probe_steps(const MeasuredModel& model, const torch::Tensor& batch, const LayerMeasureOptions& o) {
  std::vector<torch::Tensor> params, kept;
  for (int i = 0; i < model.layers; ++i)
    for (const torch::Tensor& t : model.parameters(i)) params.push_back(t);
  {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& t : params) kept.push_back(t.detach().clone());
  }
  trim(o);
  const int64_t base = host::resident_bytes();
  const bool reset = host::reset_peak_resident();
  {
    std::function<void()> step = model.make_step ? model.make_step(params) : std::function<void()>();
    for (int round = 0; round < 3; ++round) {
      torch::AutoGradMode grad(true);
      torch::Tensor x = batch.is_floating_point()
                            ? batch.detach().clone().requires_grad_(model.input_requires_grad)
                            : batch;
      for (int i = 0; i < model.layers; ++i) x = model.forward(i, x);
      torch::Tensor loss = model.loss ? model.loss(x) : torch::Tensor();
      for (torch::Tensor& t : params) t.mutable_grad().reset();  // zero_grad(set_to_none)
      if (loss.defined()) {
        loss.backward();
      } else if (x.requires_grad()) {
        x.backward(torch::ones_like(x));
      }
      if (step) step();
    }
  }
  const int64_t peak = reset ? std::max<int64_t>(0, host::peak_resident_since_reset() - base) : 0;
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < params.size(); ++k) {
    params[k].mutable_grad().reset();
    params[k].detach().copy_(kept[k]);
  }
  return peak;
}

}  // namespace

LayerMeasurement measure_layers(const MeasuredModel& model, const torch::Tensor& batch, int64_t batch_samples,
                                const torch::Tensor& larger, int64_t larger_samples, const LayerMeasureOptions& options) {
  if (model.layers < 1)
    throw InvalidArgument("measure_layers: layers: expected at least 1, found " + std::to_string(model.layers));
  if (!model.forward || !model.parameters)
    throw InvalidArgument("measure_layers: forward and parameters: expected callables");
  if (batch_samples < 1)
    throw InvalidArgument("measure_layers: batch_samples: expected at least 1, found " +
                          std::to_string(batch_samples));
  const size_t n = static_cast<size_t>(model.layers);
  const bool fit = larger.defined() && larger_samples > batch_samples;
  LayerMeasurement m;
  m.costs.resize(n);
  m.forward_fixed_s.assign(n, 0);
  m.backward_fixed_s.assign(n, 0);
  m.saved_bytes.assign(n, 0);
  m.largest_tensor_bytes.assign(n, 0);
  m.shapes.resize(n);
  torch::Tensor x = batch.detach(), big = fit ? larger.detach() : torch::Tensor(), head_input;
  int64_t output_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const int layer = static_cast<int>(i);
    m.costs[i] = time_layer(model, layer, x, options.profile);
    if (fit) {
      trim(options);
      const parallel::pipeline::LayerCost b = time_layer(model, layer, big, options.profile);
      const double k = static_cast<double>(larger_samples) / static_cast<double>(batch_samples);
      // t(b) = fixed + per_sample b: fixed = (k t(b) - t(kb)) / (k - 1), within [0, t(b)].
      const parallel::pipeline::LayerCost& c = m.costs[i];
      m.forward_fixed_s[i] = std::clamp((k * c.forward_s - b.forward_s) / (k - 1), 0.0, c.forward_s);
      m.backward_fixed_s[i] = std::clamp((k * c.backward_s - b.backward_s) / (k - 1), 0.0, c.backward_s);
    }
    for (torch::Tensor& t : model.parameters(layer)) {
      const int64_t bytes = bytes_of(t);
      m.costs[i].param_bytes += bytes;
      m.largest_tensor_bytes[i] = std::max(m.largest_tensor_bytes[i], bytes);
      m.shapes[i].push_back(t.sizes().vec());
      t.mutable_grad().reset();
    }
    // The heap its forward keeps until its backward, its output included.
    const torch::Tensor in = layer_input(model, layer, x);
    if (i + 1 == n) head_input = in;
    torch::Tensor y;
    {
      torch::AutoGradMode grad(true);
      const int64_t before = heap_in_use();
      y = model.forward(layer, in);
      m.saved_bytes[i] = std::max<int64_t>(0, heap_in_use() - before);
    }
    output_bytes = bytes_of(y);
    x = y.detach();
    y = torch::Tensor();
    if (i + 1 < n) {
      if (fit) {
        torch::NoGradGuard no_grad;
        big = model.forward(layer, layer_input(model, layer, big).detach());
      }
      if (model.measured) model.measured(layer);
    }
    trim(options);
  }
  // The head with the loss, twice: the loss's seconds and the heap it holds at its peak beyond
  // the head's saved bytes (its buffers; the output's gradient, as large as the output, comes
  // with the backward).
  m.transient_bytes = output_bytes;
  if (model.loss) {
    const int last = model.layers - 1;
    for (int round = 0; round < 2; ++round) {
      torch::AutoGradMode grad(true);
      const torch::Tensor in = head_input.is_floating_point() ? head_input.detach().requires_grad_(head_input.requires_grad()).clone()
                                                              : head_input;
      const int64_t before = heap_in_use();
      const torch::Tensor y = model.forward(last, in);
      const double t0 = cpu_seconds();
      const torch::Tensor loss = model.loss(y);
      const double t1 = cpu_seconds();
      const int64_t held = heap_in_use() - before;
      m.loss_s = 2 * (t1 - t0);
      m.transient_bytes = std::max<int64_t>(0, held - m.saved_bytes.back() + bytes_of(y));
    }
    m.costs.back().forward_s += m.loss_s;  // the loss runs after the head
  }
  if (options.step_probe) m.step_peak_bytes = probe_steps(model, batch, options);
  return m;
}

std::vector<std::vector<int64_t>> step_probe_shapes(const LayerMeasurement& m, int64_t* probe_bytes,
                                                   int64_t* all_bytes) {
  size_t largest = 0;
  *all_bytes = 0;
  for (size_t i = 0; i < m.costs.size(); ++i) {
    *all_bytes += m.costs[i].param_bytes;
    if (m.costs[i].param_bytes > m.costs[largest].param_bytes) largest = i;
  }
  std::vector<std::vector<int64_t>> out;
  *probe_bytes = 0;
  if (m.shapes.empty()) return out;
  for (const std::vector<int64_t>& shape : m.shapes[largest]) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (*probe_bytes + numel * 4 > kStepProbeBytes) break;
    *probe_bytes += numel * 4;
    out.push_back(shape);
  }
  if (out.empty()) {
    out.push_back({kStepProbeBytes / 4});
    *probe_bytes = kStepProbeBytes;
  }
  return out;
}

double measure_step(const LayerMeasurement& m,
                    const std::function<std::function<void()>(std::vector<torch::Tensor>&)>& make_step) {
  int64_t probe_bytes = 0, all_bytes = 0;
  const std::vector<std::vector<int64_t>> shapes = step_probe_shapes(m, &probe_bytes, &all_bytes);
  if (all_bytes == 0) return 0;
  std::vector<torch::Tensor> params;
  for (const std::vector<int64_t>& shape : shapes) {
    torch::Tensor p = torch::randn(shape, torch::kFloat).requires_grad_(true);
    p.mutable_grad() = torch::zeros_like(p);
    params.push_back(std::move(p));
  }
  const std::function<void()> step = make_step(params);
  std::vector<double> t;
  for (int round = 0; round < 5; ++round) {
    const double t0 = cpu_seconds();
    step();
    if (round >= 2) t.push_back(cpu_seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[1] * static_cast<double>(all_bytes) / static_cast<double>(std::max<int64_t>(1, probe_bytes));
}

}  // namespace heft::parallel::layout
