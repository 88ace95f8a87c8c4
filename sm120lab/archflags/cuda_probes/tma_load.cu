// Probe: TMA, cp.async.bulk.tensor.2d global -> shared with an mbarrier transaction count
// (PTX ISA 9.7.9.25 "cp.async.bulk.tensor", 9.7.13.15 "mbarrier"; sm_90+). The 128-byte
// CUtensorMap is passed by value as a __grid_constant__ parameter (built on the host with
// cuTensorMapEncodeTiled for a row-major float32 matrix, box 16 x 8 = 8 rows of 16 floats).
// One CTA loads the box at (x0, y0) and writes it to out (8 x 16 floats).
// Expected SASS: UTMALDG.2D.
struct __align__(64) sm120lab_tensor_map { unsigned long long words[16]; };

extern "C" __global__ void probe_tma_load(const __grid_constant__ sm120lab_tensor_map tmap, int x0, int y0, float* out) {
  __shared__ __align__(128) float tile[8 * 16];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
  const unsigned stile = (unsigned)__cvta_generic_to_shared(tile);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(sbar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(sbar), "r"(8 * 16 * 4) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        :: "r"(stile), "l"(&tmap), "r"(x0), "r"(y0), "r"(sbar) : "memory");
  }
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" :: "r"(sbar) : "memory");
  for (int i = threadIdx.x; i < 8 * 16; i += blockDim.x) out[i] = tile[i];
}
