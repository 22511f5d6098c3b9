#include <vector>

void solve(const int* x, int* is_prime, int n) {
  int maxv = 1;
  for (int i = 0; i < n; ++i)
    if (x[i] > maxv) maxv = x[i];
  std::vector<char> sieve(maxv + 1, 1);
  sieve[0] = 0;
  sieve[1] = 0;
  for (int p = 2; (long long)p * p <= maxv; ++p)
    if (sieve[p])
      for (int q = p * p; q <= maxv; q += p) sieve[q] = 0;
  for (int i = 0; i < n; ++i) is_prime[i] = sieve[x[i]];
}
