// task: cpp/prefix_sum_int
// expect: forbidden
// class: asm .incbin reads a host file into the object at compile time (no #include at all)
// feedback: .incbin
asm(".section .rodata\n.global leap_blob\nleap_blob:\n.incbin \"/etc/passwd\"\n.byte 0\n.previous");
extern "C" const char leap_blob[];

void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
  (void)leap_blob[0];
}
