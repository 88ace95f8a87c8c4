// Probe: hardware float -> FP4 conversion, cvt.rn.satfinite.e2m1x2.f32 (PTX ISA 9.7.9 "cvt").
// "cvt d, a, b" puts a in the upper nibble and b in the lower one, so element 2i goes in the
// low nibble when passed as b. Each thread packs 8 floats into one 32-bit word.
// Expected SASS where accepted: F2FP.SATFINITE.E2M1...
extern "C" __global__ void probe_cvt_e2m1(const float* x, unsigned* out, int n_words) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_words) return;
  const float* v = x + 8 * i;
  unsigned r;
  asm volatile(
      "{\n"
      ".reg .b8 q0, q1, q2, q3;\n"
      "cvt.rn.satfinite.e2m1x2.f32 q0, %2, %1;\n"
      "cvt.rn.satfinite.e2m1x2.f32 q1, %4, %3;\n"
      "cvt.rn.satfinite.e2m1x2.f32 q2, %6, %5;\n"
      "cvt.rn.satfinite.e2m1x2.f32 q3, %8, %7;\n"
      "mov.b32 %0, {q0, q1, q2, q3};\n"
      "}\n"
      : "=r"(r)
      : "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "f"(v[4]), "f"(v[5]), "f"(v[6]), "f"(v[7]));
  out[i] = r;
}
