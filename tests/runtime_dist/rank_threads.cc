// Thread ranks for the runtime tests (see rank_threads.h).
#include "rank_threads.h"

#include <gtest/gtest.h>

#include <mutex>
#include <sstream>
#include <thread>

#include "harp/runtime/comm.h"

namespace harp::testing {
namespace {

constexpr auto kTimeout = std::chrono::milliseconds(60000);

template <typename Body>
void for_each_rank(const plan::Plan& plan, const model::ModelSpec& model, Body body) {
  int world = 0;
  for (const auto& s : plan.stages) world += s.dp;
  auto store = runtime::hash_store();
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto layout = runtime::layout_for(plan, world, r);
        if (!layout.ok()) throw std::runtime_error(layout.status().to_string());
        auto comm = runtime::Comm::create(store, *layout, kTimeout, model.gpt.tied_embeddings);
        body(*comm);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
}

}  // namespace

RankRun run_plan_threads(const model::ModelSpec& model, const plan::Plan& plan,
                         const runtime::TokenSource& data, int steps, const runtime::ExecConfig& config) {
  RankRun out;
  std::mutex mu;
  auto lowered = schedule::lower_plan(plan);
  EXPECT_TRUE(lowered.ok() && lowered->check.ok);
  if (!lowered.ok()) return out;
  for_each_rank(plan, model, [&](runtime::Comm& comm) {
    runtime::Executor ex(model, plan, *lowered, comm, data, config);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) losses.push_back(ex.run_step(s).loss);
    std::lock_guard<std::mutex> lock(mu);
    if (comm.layout().rank == 0) out.losses = losses;
    if (comm.layout().dp_rank == 0) {
      for (const auto& [name, p] : ex.optimizer().params()) out.params.emplace_back(name, p.detach().clone());
      for (const auto& [name, g] : ex.named_grads()) out.grads.emplace_back(name, g.detach().clone());
    }
  });
  return out;
}

runtime::TrainSummary train_threads(const model::ModelSpec& model, const plan::Plan& plan,
                                    const runtime::TokenSource& data, const runtime::TrainOptions& options) {
  runtime::TrainSummary out;
  std::mutex mu;
  for_each_rank(plan, model, [&](runtime::Comm& comm) {
    std::ostringstream log;
    auto s = runtime::train(model, plan, comm, data, options, log);
    if (!s.ok()) throw std::runtime_error(s.status().to_string());
    std::lock_guard<std::mutex> lock(mu);
    if (comm.layout().rank == 0) out = *s;
  });
  return out;
}

plan::Plan make_plan(const model::ModelSpec& model, const std::vector<int>& cuts, const std::vector<int>& dp,
                     int microbatches, int microbatch_size, plan::ScheduleKind kind,
                     const std::vector<int>& launch_counts) {
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
    s.fwd_s = 1;
    s.bwd_s = 2;
    s.crosses_nodes = true;
    if (!launch_counts.empty()) s.launch_count = launch_counts[i];
    p.stages.push_back(s);
  }
  return p;
}

}  // namespace harp::testing
