// Zero-redundant grouping: one group per structural signature.
#include <gtest/gtest.h>

#include "harp/profile/unique_layers.h"
#include "testutil/status.h"
#include "testutil/tiny_gpt.h"

namespace harp::profile {
namespace {

model::ModelSpec gpt(int blocks, int k, int hidden = 64) {
  return harp::testing::tiny_gpt(k, true, blocks, hidden, 4, 32, 256);
}

TEST(UniqueLayers, GptWithRBlocksAndGranularityKHasTwoPlusKSignatures) {
  for (int k = 1; k <= 4; ++k) {
    for (int R : {1, 2, 5, 24}) {
      const model::ModelSpec m = gpt(R, k);
      const auto groups = unique_layers(m);
      ASSERT_EQ(static_cast<int>(groups.size()), 2 + k) << "R = " << R << ", k = " << k;
      EXPECT_EQ(m.num_layers(), 2 + R * k);
      // Head and tail alone; the j-th sub-layer of every block shares group 1 + j.
      EXPECT_EQ(groups[0].layers, std::vector<int>{0});
      EXPECT_EQ(groups.back().layers, std::vector<int>{m.num_layers() - 1});
      for (int j = 0; j < k; ++j) {
        const LayerGroup& g = groups[1 + j];
        EXPECT_EQ(g.representative, 1 + j);
        ASSERT_EQ(static_cast<int>(g.layers.size()), R);
        for (int b = 0; b < R; ++b) {
          EXPECT_EQ(g.layers[b], 1 + b * k + j);
          EXPECT_EQ(m.layers[g.layers[b]].part, j);
        }
      }
    }
  }
}

TEST(UniqueLayers, BlocksThatDifferGetTheirOwnGroups) {
  // Two blocks of hidden 64 followed by two of hidden 128 (their layers spliced into one
  // sequence): the second pair's sub-layers differ in shape, so 2 + 2k groups.
  const int k = 2;
  model::ModelSpec a = gpt(2, k, 64), b = gpt(2, k, 128);
  model::ModelSpec m = a;
  m.layers.pop_back();  // a's tail
  m.layers.insert(m.layers.end(), b.layers.begin() + 1, b.layers.end());  // b's blocks and tail
  const auto groups = unique_layers(m);
  ASSERT_EQ(groups.size(), static_cast<size_t>(2 + 2 * k));
  EXPECT_EQ(groups[1].layers, (std::vector<int>{1, 3}));  // hidden-64 attention
  EXPECT_EQ(groups[3].layers, (std::vector<int>{5, 7}));  // hidden-128 attention
  EXPECT_EQ(groups.back().layers, std::vector<int>{9});   // hidden-128 tail
  // Every layer is in exactly one group, and groups hold one signature each.
  std::vector<int> seen(m.num_layers(), 0);
  for (const auto& g : groups)
    for (int i : g.layers) {
      ++seen[i];
      EXPECT_EQ(m.layers[i].signature, g.signature);
    }
  for (int n : seen) EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace harp::profile
