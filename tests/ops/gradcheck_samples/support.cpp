// The gradcheck samples' registry and the inputs they draw (gradcheck_samples.h).
#include "../gradcheck_samples.h"

namespace hg::testing {

std::map<OpId, Sample>& gradcheck_samples() {
  static std::map<OpId, Sample> samples;
  return samples;
}

bool register_samples(const std::function<void(std::map<OpId, Sample>&)>& add) {
  add(gradcheck_samples());
  return true;
}

SamplePlacement& sample_placement() {
  thread_local SamplePlacement placement;
  return placement;
}

Tensor placed(const Tensor& constant) {
  const SamplePlacement& p = sample_placement();
  return constant.is_floating_point() ? constant.to(p.device, p.dtype) : constant.to(p.device);
}

namespace {
Generator& rng() {
  static Generator g(2024);
  return g;
}
}  // namespace

Tensor input(const Shape& sizes, double low, double high) {
  Tensor t = empty(sizes, kFloat64);
  random::fill_uniform(kFloat64, t.data_ptr(), t.numel(), low, high, rng());
  return t.requires_grad_();
}

Tensor positive(const Shape& sizes) { return input(sizes, 0.5, 2.5); }

Sample one(std::function<Tensor(const Tensor&)> f, std::function<Tensor()> make) {
  return Sample{[f](const Inputs& in) { return f(in[0]); }, [make] { return Inputs{make()}; }};
}

Sample two(std::function<Tensor(const Tensor&, const Tensor&)> f, std::function<Inputs()> make) {
  return Sample{[f](const Inputs& in) { return f(in[0], in[1]); }, make};
}

}  // namespace hg::testing
