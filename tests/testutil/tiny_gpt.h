// A GPT small enough to train in milliseconds, for the runtime tests. Defaults: 2 blocks,
// hidden 32, 4 heads, 16 tokens, vocabulary 64, tied embeddings.
#pragma once

#include "harp/common/check.h"
#include "harp/model/model_spec.h"

namespace harp::testing {

inline model::ModelSpec tiny_gpt(int granularity, bool tied = true, int blocks = 2, int hidden = 32,
                                 int heads = 4, int seq = 16, int vocab = 64) {
  model::GptConfig c;
  c.name = "custom";
  c.num_blocks = blocks;
  c.hidden = hidden;
  c.heads = heads;
  c.seq_len = seq;
  c.vocab = vocab;
  c.granularity = granularity;
  c.tied_embeddings = tied;
  auto spec = model::build_gpt(c);
  HARP_CHECK(spec.ok()) << spec.status().to_string();
  return *spec;
}

}  // namespace harp::testing
