#include <cuda_runtime.h>

__global__ void bias_relu(const float* x, const float* bias, float* y, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) {
    float v = x[r * cols + c] + bias[c];
    y[r * cols + c] = v > 0.0f ? v : 0.0f;
  }
}

void solve(const float* x, const float* bias, float* y, int rows, int cols) {
  dim3 block(32, 8);
  dim3 grid((rows + block.x - 1) / block.x, (cols + block.y - 1) / block.y);
  bias_relu<<<grid, block>>>(x, bias, y, rows, cols);
}
