// task: cuda/vector_add
// expect: runtime | wrong_answer
// class: stream injection: the work runs on a non-blocking stream that solve() never synchronises, so a timer on the default stream stops before it ends
// gpu: true
__global__ void add_kernel(const float* a, const float* b, float* c, int n) {
  // The real work of a heavy kernel, which the timer must not miss.
  const long long start = clock64();
  while (clock64() - start < 200000000LL) {
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

void solve(const float* a, const float* b, float* c, int n) {
  static cudaStream_t side = nullptr;
  if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  add_kernel<<<(n + 255) / 256, 256, 0, side>>>(a, b, c, n);
}
