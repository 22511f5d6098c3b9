#include <cuda_runtime.h>
#include <math.h>

__global__ void cosine_rows(const float* a, const float* b, float* out, int rows, int dim) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (warp >= rows) return;
  const float* ar = a + (size_t)warp * dim;
  const float* br = b + (size_t)warp * dim;
  float dot = 0.0f, na = 0.0f, nb = 0.0f;
  for (int i = lane; i < dim; i += 32) {
    dot += ar[i] * br[i];
    na += ar[i] * ar[i];
    nb += br[i] * br[i];
  }
  for (int off = 16; off > 0; off >>= 1) {
    dot += __shfl_down(dot, off);
    na += __shfl_down(na, off);
    nb += __shfl_down(nb, off);
  }
  if (lane == 0) out[warp] = dot / fmaxf(sqrtf(na) * sqrtf(nb), 1e-8f);
}

void solve(const float* a, const float* b, float* out, int rows, int dim) {
  int threads = 256;
  int blocks = (rows * 32 + threads - 1) / threads;
  cosine_rows<<<blocks, threads>>>(a, b, out, rows, dim);
}
