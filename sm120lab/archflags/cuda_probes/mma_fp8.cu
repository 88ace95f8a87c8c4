// Probe: plain FP8 warp MMA without block scaling (PTX ISA 9.7.14 "mma", m16n8k32 .e4m3.e4m3,
// introduced for sm_89). Fragments as for 8-bit m16n8k32: A 4 x b32, B 2 x b32, C/D 4 x f32.
// Expected SASS: QMMA.16832.F32.E4M3.E4M3 on sm_89/sm_12x; sm_90/sm_100 have no warp-level FP8
// MMA and ptxas emulates it (F2FP unpack + HMMA).
extern "C" __global__ void probe_mma_fp8(const unsigned* a, const unsigned* b, const float* c, float* d) {
  const int l = threadIdx.x & 31;
  float d0, d1, d2, d3;
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
      : "r"(a[4 * l]), "r"(a[4 * l + 1]), "r"(a[4 * l + 2]), "r"(a[4 * l + 3]),
        "r"(b[2 * l]), "r"(b[2 * l + 1]),
        "f"(c[4 * l]), "f"(c[4 * l + 1]), "f"(c[4 * l + 2]), "f"(c[4 * l + 3]));
  d[4 * l] = d0; d[4 * l + 1] = d1; d[4 * l + 2] = d2; d[4 * l + 3] = d3;
}
