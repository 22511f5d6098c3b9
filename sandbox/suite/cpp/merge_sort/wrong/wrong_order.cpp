#include <vector>

static void merge_sort(float* a, float* tmp, int lo, int hi) {  // sorts a[lo, hi)
  if (hi - lo < 2) return;
  int mid = lo + (hi - lo) / 2;
  merge_sort(a, tmp, lo, mid);
  merge_sort(a, tmp, mid, hi);
  int i = lo, j = mid, k = lo;
  while (i < mid && j < hi) tmp[k++] = (a[j] > a[i]) ? a[j++] : a[i++];
  while (i < mid) tmp[k++] = a[i++];
  while (j < hi) tmp[k++] = a[j++];
  for (k = lo; k < hi; ++k) a[k] = tmp[k];
}

void solve(const float* x, float* y, int n) {
  std::vector<float> tmp(n);
  for (int i = 0; i < n; ++i) y[i] = x[i];
  merge_sort(y, tmp.data(), 0, n);
}
