// sm120lab: host-side shared-memory report for CUTLASS grouped-GEMM kernel types.
//
// Force-included (nvcc -include) into FlashInfer's own generated SM120 instantiation files.
// The launcher macro in moe_gemm_tma_ws_launcher.inl gets ONE extra line (instrumentation,
// added by sm120lab.cutlass_smem.build, never by the patch) right after
// `using GemmGrouped = ...GemmUniversalAdapter<GemmKernel>;`:
//     SM120LAB_SMEM_PROBE(GemmKernel, CollectiveMainloop, CollectiveEpilogue, T, WeightType,
//                         OutputType, FUSION, SwapAB, IsMXFPX);
// That line odr-uses a static data member of a class template; its dynamic initialiser adds
// one record per kernel type to a registry at program start, and main() (probe_main.cpp)
// prints the registry as JSON. Nothing here runs on a GPU: every number is a compile-time
// constant of the kernel types (sizeof / alignof / DispatchPolicy::Stages).
#pragma once
#include "cute/tensor.hpp"
#include "cutlass/arch/arch.h"
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sm120lab_smem {

struct Record {
  std::string act, weight, out;      // type names from __PRETTY_FUNCTION__
  int fusion, swap_ab, mxfpx;        // EpilogueFusion value, SwapAB, IsMXFPX (launcher params)
  int tile_m, tile_n, tile_k;        // CollectiveMainloop::TileShape
  int stages;                        // CollectiveMainloop::DispatchPolicy::Stages
  long kernel_smem, kernel_align;    // sizeof / alignof(GemmKernel::SharedStorage)
  long kernel_smem_const;            // GemmKernel::SharedStorageSize (what initialize() requests)
  long tensors, pipelines, scheduler_response, tensormaps;  // members of GemmKernel::SharedStorage
  long mainloop_tensors, mainloop_tensors_align, mainloop_pipeline, mainloop_tensormaps;
  long epilogue_tensors, epilogue_shared;   // CollectiveEpilogue::TensorStorage / ::SharedStorage
  long smem_a, smem_b, smem_sfa, smem_sfb;  // bytes for ALL stages (cosize * bits / 8)
  long bits_a, bits_b, bits_sf;
  long capacity;                     // cutlass::arch::sm120_smem_capacity_bytes
  std::string kernel_type;           // __PRETTY_FUNCTION__ of the kernel (for the record)
};

inline std::vector<Record>& registry() {
  static std::vector<Record> r;
  return r;
}

template <class X>
std::string type_name() {
  std::string s = __PRETTY_FUNCTION__;
  auto a = s.find("X = ");
  if (a == std::string::npos) return s;
  a += 4;
  auto b = s.find_first_of(";]", a);
  return s.substr(a, b - a);
}

// Member-size detection (C++17): -1 when the member does not exist in this CUTLASS version.
#define SM120LAB_MEMBER_SIZE(NAME)                                                          \
  template <class S, class = void> struct size_##NAME { static constexpr long value = -1; }; \
  template <class S>                                                                         \
  struct size_##NAME<S, std::void_t<decltype(std::declval<S&>().NAME)>> {                    \
    static constexpr long value = sizeof(std::declval<S&>().NAME);                           \
  };
SM120LAB_MEMBER_SIZE(tensors)
SM120LAB_MEMBER_SIZE(pipelines)
SM120LAB_MEMBER_SIZE(scheduler_response)
SM120LAB_MEMBER_SIZE(tensormaps)
#undef SM120LAB_MEMBER_SIZE

template <class M, class = void> struct tensormap_size { static constexpr long value = -1; };
template <class M>
struct tensormap_size<M, std::void_t<typename M::TensorMapStorage>> {
  static constexpr long value = sizeof(typename M::TensorMapStorage);
};

template <class Kernel, class Mainloop, class Epilogue, class T, class W, class O, int Fusion,
          bool Swap, bool Mx>
Record make_record() {
  using SS = typename Kernel::SharedStorage;
  Record r;
  r.act = type_name<T>(); r.weight = type_name<W>(); r.out = type_name<O>();
  r.fusion = Fusion; r.swap_ab = Swap; r.mxfpx = Mx;
  r.tile_m = cute::size<0>(typename Mainloop::TileShape{});
  r.tile_n = cute::size<1>(typename Mainloop::TileShape{});
  r.tile_k = cute::size<2>(typename Mainloop::TileShape{});
  r.stages = Mainloop::DispatchPolicy::Stages;
  r.kernel_smem = sizeof(SS);
  r.kernel_align = alignof(SS);
  r.kernel_smem_const = Kernel::SharedStorageSize;
  r.tensors = size_tensors<SS>::value;
  r.pipelines = size_pipelines<SS>::value;
  r.scheduler_response = size_scheduler_response<SS>::value;
  r.tensormaps = size_tensormaps<SS>::value;
  r.mainloop_tensors = sizeof(typename Mainloop::TensorStorage);
  r.mainloop_tensors_align = alignof(typename Mainloop::TensorStorage);
  r.mainloop_pipeline = sizeof(typename Mainloop::PipelineStorage);
  r.mainloop_tensormaps = tensormap_size<Mainloop>::value;
  r.epilogue_tensors = sizeof(typename Epilogue::TensorStorage);
  r.epilogue_shared = sizeof(typename Epilogue::SharedStorage);
  r.bits_a = cute::sizeof_bits_v<typename Mainloop::SmemAllocTypeA>;
  r.bits_b = cute::sizeof_bits_v<typename Mainloop::SmemAllocTypeB>;
  r.bits_sf = cute::sizeof_bits_v<typename Mainloop::ElementSF>;
  r.smem_a = long(cute::cosize_v<typename Mainloop::SmemLayoutA>) * r.bits_a / 8;
  r.smem_b = long(cute::cosize_v<typename Mainloop::SmemLayoutB>) * r.bits_b / 8;
  r.smem_sfa = long(cute::cosize_v<typename Mainloop::SmemLayoutSFA>) * r.bits_sf / 8;
  r.smem_sfb = long(cute::cosize_v<typename Mainloop::SmemLayoutSFB>) * r.bits_sf / 8;
  r.capacity = cutlass::arch::sm120_smem_capacity_bytes;
  r.kernel_type = type_name<Kernel>();
  return r;
}

inline bool add(Record r) {
  registry().push_back(std::move(r));
  return true;
}

template <class Kernel, class Mainloop, class Epilogue, class T, class W, class O, int Fusion,
          bool Swap, bool Mx>
struct Registrar {
  static const bool registered;
};
template <class Kernel, class Mainloop, class Epilogue, class T, class W, class O, int Fusion,
          bool Swap, bool Mx>
const bool Registrar<Kernel, Mainloop, Epilogue, T, W, O, Fusion, Swap, Mx>::registered =
    add(make_record<Kernel, Mainloop, Epilogue, T, W, O, Fusion, Swap, Mx>());

}  // namespace sm120lab_smem

#define SM120LAB_SMEM_PROBE(Kernel, Mainloop, Epilogue, T, W, O, FUSION, SWAP, MX)            \
  (void)&::sm120lab_smem::Registrar<Kernel, Mainloop, Epilogue, T, W, O, static_cast<int>(FUSION), \
                                    SWAP, MX>::registered
