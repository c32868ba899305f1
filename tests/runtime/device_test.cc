// A rank's GPU against its libtorch and dtype (runtime/exec/device.h), on the CPU: the
// kernel images read from libtorch's build configuration text, which capabilities they
// run on (cubins within a major version, PTX onwards), and the one-line refusals of a
// V100 under a CUDA 13 PyTorch and of bfloat16 before sm_80.
#include "harp/runtime/exec/device.h"

#include <gtest/gtest.h>

namespace harp::runtime {
namespace {

// The NVCC line of PyTorch 2.11.0+cu130's configuration (torch.__config__.show()).
const char* kCu130 =
    "  - NVCC architecture flags: -gencode;arch=compute_75,code=sm_75;-gencode;arch=compute_80,code=sm_80;-gencode;"
    "arch=compute_86,code=sm_86;-gencode;arch=compute_90,code=sm_90;-gencode;arch=compute_100,code=sm_100;-gencode;"
    "arch=compute_120,code=sm_120\n  - CuDNN 91900\n";

TEST(CudaArchs, ReadFromLibtorchsConfiguration) {
  EXPECT_EQ(cuda_archs_of(kCu130),
            (std::vector<std::string>{"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"}));
  EXPECT_EQ(cuda_archs_of("-gencode;arch=compute_90,code=[sm_90,compute_90]"),
            (std::vector<std::string>{"sm_90", "compute_90"}));
  EXPECT_TRUE(cuda_archs_of("a CPU build: no NVCC line").empty());
}

TEST(CudaArchs, CubinsRunWithinAMajorVersionAndPtxOnwards) {
  const auto archs = cuda_archs_of(kCu130);
  EXPECT_FALSE(archs_run_on(archs, 7, 0));  // V100
  EXPECT_TRUE(archs_run_on(archs, 7, 5));   // T4
  EXPECT_TRUE(archs_run_on(archs, 8, 9));   // L40S: sm_86's cubin
  EXPECT_TRUE(archs_run_on(archs, 9, 0));   // H100
  EXPECT_TRUE(archs_run_on(archs, 12, 0));
  EXPECT_FALSE(archs_run_on({"sm_80"}, 9, 0));
  EXPECT_TRUE(archs_run_on({"sm_80", "compute_80"}, 9, 0));  // PTX, compiled by the driver
  EXPECT_FALSE(archs_run_on({"compute_80"}, 7, 5));
}

TEST(CudaArchs, AV100UnderCuda13AndBfloat16BeforeSm80AreRefusedInOneLine) {
  const auto archs = cuda_archs_of(kCu130);
  const Status v100 = check_cuda_device({"Tesla V100-SXM2-32GB", 7, 0}, archs, false);
  ASSERT_FALSE(v100.ok());
  EXPECT_EQ(v100.message().find('\n'), std::string::npos);
  EXPECT_NE(v100.message().find("Tesla V100-SXM2-32GB is sm_70, and this build's libtorch carries kernels for sm_75 "
                                "sm_80 sm_86 sm_90 sm_100 sm_120 only"),
            std::string::npos)
      << v100.message();
  EXPECT_NE(v100.message().find("\"Volta\""), std::string::npos) << v100.message();
  // Under a libtorch with Volta's kernels the V100 runs, but not in bfloat16.
  EXPECT_TRUE(check_cuda_device({"Tesla V100-SXM2-32GB", 7, 0}, {"sm_70", "sm_80"}, false).ok());
  const Status bf16 = check_cuda_device({"Tesla T4", 7, 5}, archs, true);
  ASSERT_FALSE(bf16.ok());
  EXPECT_NE(bf16.message().find("Tesla T4 is sm_75, which has no bfloat16 arithmetic (from sm_80 on); fix: train in "
                                "float16"),
            std::string::npos)
      << bf16.message();
  EXPECT_TRUE(check_cuda_device({"NVIDIA H100 80GB HBM3", 9, 0}, archs, true).ok());
  EXPECT_TRUE(check_cuda_device({"unknown list", 7, 0}, {}, false).ok());
}

}  // namespace
}  // namespace harp::runtime
