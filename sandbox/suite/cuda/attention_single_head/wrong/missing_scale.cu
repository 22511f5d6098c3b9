#include <cuda_runtime.h>
#include <math.h>

#define THREADS 128
#define MAX_S 1024

// One block per query row: scores into shared memory, softmax, then the weighted sum of V.
__global__ void attention_kernel(const float* Q, const float* K, const float* V, float* O, int S, int D) {
  __shared__ float p[MAX_S];
  __shared__ float red[THREADS];
  int i = blockIdx.x, t = threadIdx.x;
  const float* q = Q + (size_t)i * D;
  float scale = rsqrtf((float)D);
  for (int j = t; j < S; j += THREADS) {
    float s = 0.0f;
    for (int d = 0; d < D; ++d) s += q[d] * K[(size_t)j * D + d];
    p[j] = s;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int j = t; j < S; j += THREADS) m = fmaxf(m, p[j]);
  red[t] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) red[t] = fmaxf(red[t], red[t + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int j = t; j < S; j += THREADS) {
    float e = expf(p[j] - m);
    p[j] = e;
    sum += e;
  }
  red[t] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  float inv = 1.0f / red[0];
  for (int d = t; d < D; d += THREADS) {
    float acc = 0.0f;
    for (int j = 0; j < S; ++j) acc += p[j] * V[(size_t)j * D + d];
    O[(size_t)i * D + d] = acc * inv;
  }
}

void solve(const float* Q, const float* K, const float* V, float* O, int S, int D) {
  attention_kernel<<<S, THREADS>>>(Q, K, V, O, S, D);
}
