// Thread ranks for the runtime tests (see rank_threads.h).
#include "rank_threads.h"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "harp/runtime/comm/comm.h"
#include "harp/runtime/comm/rendezvous.h"
#include "harp/runtime/comm/mem_transport.h"
#include "harp/runtime/nn/trainable.h"
#include "testutil/tiny_gpt.h"

namespace harp::testing {
namespace {

constexpr auto kTimeout = std::chrono::milliseconds(60000);

using Connect = std::function<std::unique_ptr<runtime::Transport>(const runtime::RankLayout&)>;

// Runs `body` on every rank as a thread; returns each rank's error ("" when it finished).
template <typename Body>
std::vector<std::string> for_each_rank_on(const plan::Plan& plan, const Connect& connect, Body body) {
  int world = 0;
  for (const auto& s : plan.stages) world += s.dp * s.tp;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto layout = runtime::layout_for(plan, world, r);
        if (!layout.ok()) throw std::runtime_error(layout.status().to_string());
        auto comm = connect(*layout);
        body(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "failed";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// Gloo ranks over one in-process store.
// c10d's transport: Gloo on the CPU, NCCL for CUDA tensors (comm.h).
Connect gloo(const model::ModelSpec& model, const torch::Device& device = torch::kCPU) {
  auto store = runtime::hash_store();
  return [store, tied = model.gpt.tied_embeddings, device](const runtime::RankLayout& l) -> std::unique_ptr<runtime::Transport> {
    return runtime::C10dTransport::create(store, l, kTimeout, tied, device);
  };
}

template <typename Body>
void for_each_rank(const plan::Plan& plan, const model::ModelSpec& model, Body body,
                   const torch::Device& device = torch::kCPU) {
  auto errors = for_each_rank_on(plan, gloo(model, device), body);
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) ADD_FAILURE() << "rank " << r << ": " << errors[r];
}

}  // namespace

std::vector<std::string> run_plan_in_memory(const model::ModelSpec& model, const plan::Plan& plan,
                                            const runtime::TokenSource& data, int steps,
                                            const runtime::ExecConfig& config, std::vector<runtime::Fault> faults,
                                            std::chrono::milliseconds timeout, RankRun* out,
                                            runtime::MemNetwork::Rules rules) {
  int world = 0;
  for (const auto& s : plan.stages) world += s.dp * s.tp;
  runtime::MemNetwork net(world, std::move(faults), rules);
  auto lowered = schedule::lower_plan(plan);
  HARP_CHECK(lowered.ok() && lowered->check.ok);
  std::mutex mu;
  if (out != nullptr) out->host_syncs.assign(static_cast<size_t>(steps), 0);
  return for_each_rank_on(
      plan, [&](const runtime::RankLayout& l) { return net.connect(l, timeout); },
      [&](runtime::Transport& comm) {
        runtime::Executor ex(model, plan, *lowered, comm, data, config);
        std::vector<double> losses;
        std::vector<std::int64_t> syncs;
        for (int s = 0; s < steps; ++s) {
          const runtime::StepResult r = ex.run_step(s);
          losses.push_back(r.loss);
          syncs.push_back(r.host_syncs);
        }
        std::lock_guard<std::mutex> lock(mu);
        if (out == nullptr) return;
        if (comm.layout().rank == 0) out->losses = losses;
        for (int s = 0; s < steps; ++s) out->host_syncs[s] = std::max(out->host_syncs[s], syncs[s]);
      });
}

RankRun run_plan_threads(const model::ModelSpec& model, const plan::Plan& plan,
                         const runtime::TokenSource& data, int steps, const runtime::ExecConfig& config) {
  RankRun out;
  std::mutex mu;
  auto lowered = schedule::lower_plan(plan);
  EXPECT_TRUE(lowered.ok() && lowered->check.ok);
  if (!lowered.ok()) return out;
  for_each_rank(plan, model, [&](runtime::Transport& comm) {
    runtime::Executor ex(model, plan, *lowered, comm, data, config);
    std::vector<double> losses, norms;
    for (int s = 0; s < steps; ++s) {
      const runtime::StepResult r = ex.run_step(s);
      losses.push_back(r.loss);
      norms.push_back(r.grad_norm);
    }
    // Full tensors: tp shards gathered (a collective over the tp group, so outside the
    // lock). Under ZeRO the summed gradients are sharded: none are kept.
    const bool keep = comm.layout().dp_rank == 0;
    const auto params = keep ? ex.full_tensors(ex.optimizer().params()) : std::vector<std::pair<std::string, torch::Tensor>>();
    const auto grads = keep && ex.zero_level() == 0 ? ex.full_tensors(ex.named_grads())
                                                    : std::vector<std::pair<std::string, torch::Tensor>>();
    std::lock_guard<std::mutex> lock(mu);
    if (comm.layout().rank == 0) {
      out.losses = losses;
      out.grad_norms = norms;
    }
    if (keep && comm.layout().tp_rank == 0) {
      for (const auto& [name, p] : params) out.params.emplace_back(name, p.detach().to(torch::kCPU).clone());
      for (const auto& [name, g] : grads) out.grads.emplace_back(name, g.detach().to(torch::kCPU).clone());
    }
  }, config.device);
  return out;
}

runtime::TrainSummary train_threads(const model::ModelSpec& model, const plan::Plan& plan,
                                    const runtime::TokenSource& data, const runtime::TrainOptions& options) {
  runtime::TrainSummary out;
  std::mutex mu;
  for_each_rank(plan, model, [&](runtime::Transport& comm) {
    std::ostringstream log;
    auto s = runtime::train(model, plan, comm, data, options, log);
    if (!s.ok()) throw std::runtime_error(s.status().to_string());
    std::lock_guard<std::mutex> lock(mu);
    if (comm.layout().rank == 0) out = *s;
  }, options.exec.device);
  return out;
}

runtime::TrainSummary train_in_memory(const model::ModelSpec& model, const plan::Plan& plan,
                                      const runtime::TokenSource& data, const runtime::TrainOptions& options,
                                      runtime::MemNetwork& net) {
  runtime::TrainSummary out;
  std::mutex mu;
  auto errors = for_each_rank_on(
      plan, [&](const runtime::RankLayout& l) { return net.connect(l, kTimeout); },
      [&](runtime::Transport& comm) {
        std::ostringstream log;
        auto s = runtime::train(model, plan, comm, data, options, log);
        if (!s.ok()) {
          comm.abort(s.status().message());
          throw std::runtime_error(s.status().to_string());
        }
        std::lock_guard<std::mutex> lock(mu);
        if (comm.layout().rank == 0) out = *s;
      });
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) ADD_FAILURE() << "rank " << r << ": " << errors[r];
  return out;
}

std::vector<std::string> train_threads_errors(const model::ModelSpec& model, const plan::Plan& plan,
                                              const runtime::TokenSource& data, const runtime::TrainOptions& options) {
  // As harp train does (TrainingRun::open), the plan is checked before any group is made:
  // a rank that failed the check after making them closed its sockets while a slower
  // peer still finished its handshake, and that peer reported the closed connection
  // instead of the check (seen once under load).
  if (const Status s = runtime::check_plan_matches_model(plan, model); !s.ok()) {
    int world = 0;
    for (const auto& st : plan.stages) world += st.dp * st.tp;
    return std::vector<std::string>(static_cast<size_t>(world), s.message());
  }
  return for_each_rank_on(
      plan, gloo(model),
      [&](runtime::Transport& comm) {
        std::ostringstream log;
        auto s = runtime::train(model, plan, comm, data, options, log);
        if (!s.ok()) {
          comm.abort(s.status().message());
          throw std::runtime_error(s.status().message());
        }
      });
}

plan::Plan make_plan(const model::ModelSpec& model, const std::vector<int>& cuts, const std::vector<int>& dp,
                     int microbatches, int microbatch_size, plan::ScheduleKind kind,
                     const std::vector<int>& launch_counts, const std::vector<int>& tp) {
  plan::Plan p;
  p.microbatches = microbatches;
  p.microbatch_size = microbatch_size;
  p.schedule = kind;
  std::vector<int> starts = {0};
  starts.insert(starts.end(), cuts.begin(), cuts.end());
  for (size_t i = 0; i < starts.size(); ++i) {
    plan::Stage s;
    s.first_layer = starts[i];
    s.last_layer = i + 1 < starts.size() ? starts[i + 1] : model.num_layers();
    s.dp = dp[i];
    if (!tp.empty()) s.tp = tp[i];
    s.fwd_s = 1;
    s.bwd_s = 2;
    s.bwd_weight_s = 0.8;  // what a split backward's W takes of it (zero-bubble kinds)
    s.crosses_nodes = true;
    if (!launch_counts.empty()) s.launch_count = launch_counts[i];
    p.stages.push_back(s);
  }
  return p;
}

model::ModelSpec three_block_model(int k, const std::string& family, int vocab) {
  if (family == "gpt") return tiny_gpt(k, /*tied=*/true, /*blocks=*/3, 32, 4, 16, vocab);
  const model::ModelSpec llama = tiny_llama(k, /*tied=*/false, /*blocks=*/3, 32, 4, 16, vocab);
  if (family == "llama") return llama;
  HARP_CHECK_EQ(family, "lineage");
  model::GptConfig c = llama.gpt;
  c.qkv_bias = true;                        // Qwen2
  c.qk_norm = true;                         // Qwen3
  c.head_dim = 12;                          // not 32 / 4
  c.sliding_window = 5;                     // Mistral, shorter than the 16 positions
  c.rope_scaling = {"llama3", 8, 1, 4, 8};  // LLaMA 3.1
  c.norm_eps = 1e-6;
  auto spec = model::build_gpt(c);
  HARP_CHECK(spec.ok()) << spec.status().message();
  return *spec;
}

runtime::ExecConfig equivalence_config(torch::Dtype dtype) {
  runtime::ExecConfig cfg;
  cfg.seed = 11;
  cfg.dtype = dtype;
  cfg.optim = equivalence_optim();
  return cfg;
}

runtime::OptimConfig equivalence_optim() {
  runtime::OptimConfig o;
  o.lr = 1e-3;
  o.warmup_steps = 2;
  o.decay_steps = 10;
  o.grad_clip = 0.5;
  return o;
}

}  // namespace harp::testing
