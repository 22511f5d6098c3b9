// task: cuda/sum_reduce
// expect: forbidden
// class: CUB (forbidden) included and used inside a region a text scanner takes for a comment (raw string trick)
// feedback: cub
#include <cuda_runtime.h>
static const char* k_note = R"(" /* ")";
#include <cub/block/block_reduce.cuh>

__global__ void sum_kernel(const float* x, float* out, int n) {
  using reduce = cub::BlockReduce<float, 256>;
  __shared__ typename reduce::TempStorage scratch;
  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) acc += x[i];
  float total = reduce(scratch).Sum(acc);
  if (threadIdx.x == 0) atomicAdd(out, total);
}
// */

void solve(const float* x, float* out, int n) {
  cudaMemset(out, 0, sizeof(float));
  int blocks = (n + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  sum_kernel<<<blocks, 256>>>(x, out, n);
}
