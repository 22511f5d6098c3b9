#include <cuda_runtime.h>
#include <math.h>

__global__ void rope_kernel(const float* x, float* out, int seq, int dim) {
  int half = dim / 2;
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= seq * half) return;
  int p = idx / half;
  int i = idx % half;
  float inv_freq = powf(10000.0f, -2.0f * i / dim);
  float theta = p * inv_freq;
  float s, c;
  sincosf(theta, &s, &c);
  float a = x[p * dim + 2 * i];
  float b = x[p * dim + 2 * i + 1];
  out[p * dim + 2 * i] = a * c - b * s;
  out[p * dim + 2 * i + 1] = a * s + b * c;
}

void solve(const float* x, float* out, int seq, int dim) {
  int pairs = seq * (dim / 2);
  rope_kernel<<<(pairs + 255) / 256, 256>>>(x, out, seq, dim);
}
