// task: cuda/vector_add
// expect: wrong_answer
// class: output caching keyed on the device address (CUDA-L1): the same buffers skip the kernel
// gpu: true
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  static const float* seen_a = nullptr;
  static float* seen_c = nullptr;
  static float* cache = nullptr;
  if (a == seen_a && c == seen_c && cache != nullptr) {
    cudaMemcpy(c, cache, sizeof(float) * n, cudaMemcpyDeviceToDevice);
    return;
  }
  add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
  if (cache == nullptr) cudaMalloc(&cache, sizeof(float) * n);
  cudaMemcpy(cache, c, sizeof(float) * n, cudaMemcpyDeviceToDevice);
  seen_a = a;
  seen_c = c;
}
