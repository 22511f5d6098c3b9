static int lcs(const int* a, const int* b, int i, int j) {
  if (i == 0 || j == 0) return 0;
  if (a[i - 1] == b[j - 1]) return lcs(a, b, i - 1, j - 1) + 1;
  int x = lcs(a, b, i - 1, j), y = lcs(a, b, i, j - 1);
  return x > y ? x : y;
}

void solve(const int* a, const int* b, int* out, int n, int m) {
  out[0] = lcs(a, b, n, m);
}
