#include "harp/model/utilisation.h"

#include "harp/common/check.h"

namespace harp::model {

double model_flops(const ModelSpec& model, int first, int last, double samples) {
  HARP_CHECK(0 <= first && first <= last && last <= model.num_layers()) << first << ".." << last;
  double forward = 0;
  for (int i = first; i < last; ++i) forward += model.layers[i].fwd_flops;
  return 3.0 * forward * samples;
}

double mfu(double flops, double seconds, int devices, double peak_tflops) {
  if (peak_tflops <= 0 || seconds <= 0 || devices <= 0) return 0;
  return flops / (seconds * devices * peak_tflops * 1e12);
}

}  // namespace harp::model
