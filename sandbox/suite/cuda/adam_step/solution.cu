#include <cuda_runtime.h>
#include <math.h>

__global__ void adam_kernel(float* param, const float* grad, float* m, float* v, float lr, float beta1,
                            float beta2, float eps, float bc1, float bc2, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float g = grad[i];
  float mi = beta1 * m[i] + (1.0f - beta1) * g;
  float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  float m_hat = mi / bc1;
  float v_hat = vi / bc2;
  param[i] -= lr * m_hat / (sqrtf(v_hat) + eps);
}

void solve(float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
           float eps, int t, int n) {
  float bc1 = 1.0f - powf(beta1, (float)t);
  float bc2 = 1.0f - powf(beta2, (float)t);
  adam_kernel<<<(n + 255) / 256, 256>>>(param, grad, m, v, lr, beta1, beta2, eps, bc1, bc2, n);
}
