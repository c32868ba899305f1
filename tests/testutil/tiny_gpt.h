// A GPT or LLaMA small enough to train in milliseconds, for the runtime tests. Defaults:
// 2 blocks, hidden 32, 4 heads, 16 tokens, vocabulary 64; GPT tied, LLaMA untied with
// 2 key/value heads (grouped-query attention) and ffn 64.
#pragma once

#include <string>

#include "harp/common/check.h"
#include "harp/model/model_spec.h"

namespace harp::testing {

// The one builder behind both: kv_heads and ffn 2·hidden apply to LLaMA only.
inline model::ModelSpec tiny_spec(const std::string& family, int granularity, bool tied, int blocks, int hidden,
                                  int heads, int seq, int vocab, int kv_heads) {
  model::GptConfig c;
  c.family = family;
  c.name = "custom";
  c.num_blocks = blocks;
  c.hidden = hidden;
  c.heads = heads;
  c.seq_len = seq;
  c.vocab = vocab;
  c.granularity = granularity;
  c.tied_embeddings = tied;
  if (family == "llama") {
    c.kv_heads = kv_heads;
    c.ffn_hidden = 2 * hidden;
  }
  auto spec = model::build_gpt(c);
  HARP_CHECK(spec.ok()) << spec.status().to_string();
  return *spec;
}

inline model::ModelSpec tiny_gpt(int granularity, bool tied = true, int blocks = 2, int hidden = 32,
                                 int heads = 4, int seq = 16, int vocab = 64) {
  return tiny_spec("gpt", granularity, tied, blocks, hidden, heads, seq, vocab, 0);
}

inline model::ModelSpec tiny_llama(int granularity, bool tied = false, int blocks = 2, int hidden = 32,
                                   int heads = 4, int seq = 16, int vocab = 64, int kv_heads = 2) {
  return tiny_spec("llama", granularity, tied, blocks, hidden, heads, seq, vocab, kv_heads);
}

// tiny_gpt or tiny_llama by family ("gpt" | "llama"); the tests' defaults for tied.
inline model::ModelSpec tiny_model(const std::string& family, int granularity, bool tied, int blocks = 2,
                                   int hidden = 32, int heads = 4, int seq = 16, int vocab = 64) {
  if (family == "llama") {
    const int kv = heads % 2 == 0 ? heads / 2 : heads;
    return tiny_llama(granularity, tied, blocks, hidden, heads, seq, vocab, kv);
  }
  return tiny_gpt(granularity, tied, blocks, hidden, heads, seq, vocab);
}

}  // namespace harp::testing
