// task: cuda/vector_add
// expect: runtime | wrong_answer
// class: thread injection: a host thread launches the kernel after solve() returns
// gpu: true
#include <chrono>
#include <thread>

__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    add_kernel<<<(n + 255) / 256, 256>>>(a, b, c, n);
    cudaDeviceSynchronize();
  }).detach();
}
