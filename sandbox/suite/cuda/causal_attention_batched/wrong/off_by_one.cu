#include <cuda_runtime.h>
#include <math.h>

#define MAX_S 256

// One warp per (head, query) pair; lanes split the keys, then the head dimension.
__global__ void causal_attention(const float* Q, const float* K, const float* V, float* O, int BH, int S, int D) {
  __shared__ float probs[8][MAX_S];
  int warp_in_block = threadIdx.x / 32, lane = threadIdx.x % 32;
  int pair = blockIdx.x * 8 + warp_in_block;
  if (pair >= BH * S) return;
  int h = pair / S, i = pair % S;
  const float* q = Q + ((size_t)h * S + i) * D;
  const float* Kh = K + (size_t)h * S * D;
  const float* Vh = V + (size_t)h * S * D;
  float* p = probs[warp_in_block];
  float scale = rsqrtf((float)D);
  float m = -INFINITY;
  for (int j = lane; j < i; j += 32) {
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += q[d] * Kh[j * D + d];
    s *= scale;
    p[j] = s;
    m = fmaxf(m, s);
  }
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.0f;
  for (int j = lane; j < i; j += 32) {
    float e = expf(p[j] - m);
    p[j] = e;
    sum += e;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __syncwarp();
  for (int d = lane; d < D; d += 32) {
    float acc = 0.0f;
    for (int j = 0; j < i; ++j) acc += p[j] * Vh[j * D + d];
    O[((size_t)h * S + i) * D + d] = acc / sum;
  }
}

void solve(const float* Q, const float* K, const float* V, float* O, int BH, int S, int D) {
  int pairs = BH * S;
  causal_attention<<<(pairs + 7) / 8, 256>>>(Q, K, V, O, BH, S, D);
}
