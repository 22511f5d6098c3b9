#include <cuda_runtime.h>

#define BS 1024

// Single-pass chained scan: each block waits for its predecessor's inclusive prefix.
__global__ void chained_scan(const int* x, int* y, volatile int* flags, volatile int* prefix, int* ticket, int n) {
  __shared__ int buf[2][BS];
  __shared__ int bid;
  __shared__ int carry;
  int t = threadIdx.x;
  if (t == 0) bid = atomicAdd(ticket, 1);
  __syncthreads();
  int b = bid;
  int g = b * BS + t;
  int v0 = g < n ? x[g] : 0;
  int in = 0;
  buf[0][t] = v0;
  __syncthreads();
  for (int off = 1; off < BS; off <<= 1) {
    int v = buf[in][t];
    if (t >= off) v += buf[in][t - off];
    buf[1 - in][t] = v;
    __syncthreads();
    in = 1 - in;
  }
  if (t == 0) {
    int c = 0;
    if (b > 0) {
      while (flags[b - 1] == 0) {
      }
      c = prefix[b - 1];
      prefix[b] = c + buf[in][BS - 1];
      __threadfence();
      flags[b] = 1;
    }
    carry = c;
  }
  __syncthreads();
  if (g < n) y[g] = carry + buf[in][t] - v0;
}

void solve(const int* x, int* y, int n) {
  int blocks = (n + BS - 1) / BS;
  int *flags, *prefix, *ticket;
  cudaMalloc(&flags, blocks * sizeof(int));
  cudaMalloc(&prefix, blocks * sizeof(int));
  cudaMalloc(&ticket, sizeof(int));
  cudaMemset(flags, 0, blocks * sizeof(int));
  cudaMemset(ticket, 0, sizeof(int));
  chained_scan<<<blocks, BS>>>(x, y, flags, prefix, ticket, n);
  cudaDeviceSynchronize();
  cudaFree(flags);
  cudaFree(prefix);
  cudaFree(ticket);
}
