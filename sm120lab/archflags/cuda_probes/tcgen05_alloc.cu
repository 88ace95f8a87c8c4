// Probe: Blackwell datacenter tensor memory, tcgen05.alloc / relinquish_alloc_permit / dealloc
// (PTX ISA 9.7.16 "tcgen05"). Exists on sm_100a/sm_100f (and 101/103/110), not on SM120/SM121.
// Expected SASS where accepted: UTCATOMSWS.
extern "C" __global__ void probe_tcgen05_alloc(unsigned* out) {
  __shared__ unsigned taddr;
  const unsigned dst = (unsigned)__cvta_generic_to_shared(&taddr);
  if (threadIdx.x < 32) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;\n" :: "r"(dst) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
  }
  __syncthreads();
  const unsigned a = taddr;
  if (threadIdx.x < 32) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;\n" :: "r"(a) : "memory");
  }
  if (threadIdx.x == 0) out[0] = a;
}
