// The parts of the LLaMA lineage that the training layers (gpt.cc) and generation
// (generate.cc) share: RMSNorm, the rotary frequencies and the attention mask (gpt_pieces.h).
#include <cmath>

#include "gpt_pieces.h"

namespace harp::runtime {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto compute = x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto y = x.to(compute);
  y = y * torch::rsqrt(y.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * y.to(x.scalar_type());
}

torch::Tensor rotary_inv_freq(const model::GptConfig& c, std::int64_t d) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor inv = torch::pow(c.rope_theta, -torch::arange(0, d, 2, f64) / static_cast<double>(d));
  const model::RopeScaling& r = c.rope_scaling;
  if (r.type != "llama3") return inv;
  // Wavelengths beyond the context / low_freq_factor are stretched by the factor; those
  // below the context / high_freq_factor kept; the band between interpolated smoothly.
  const double old = r.original_max_position_embeddings;
  const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
  const torch::Tensor wavelen = 2 * M_PI / inv;
  torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv / r.factor, inv);
  const torch::Tensor smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const torch::Tensor medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

torch::Tensor attention_allowed(std::int64_t first, std::int64_t queries, std::int64_t keys, int window,
                                const torch::Device& device) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor q = torch::arange(first, first + queries, i64).unsqueeze(1), k = torch::arange(keys, i64);
  torch::Tensor allowed = k <= q;
  if (window > 0) allowed = allowed & (k > q - window);
  return allowed;
}

}  // namespace harp::runtime
