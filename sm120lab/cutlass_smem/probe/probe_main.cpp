// sm120lab: prints the records collected by sm120lab_smem_probe.h as one JSON array.
// Linked with FlashInfer's generated SM120 instantiation objects; needs no GPU.
#include <cstdio>
#include <string>
#include <vector>

#include "sm120lab_smem_probe.h"

static std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

int main() {
  auto& reg = sm120lab_smem::registry();
  std::printf("[\n");
  for (size_t i = 0; i < reg.size(); ++i) {
    auto const& r = reg[i];
    std::printf(
        "{\"act\":\"%s\",\"weight\":\"%s\",\"out\":\"%s\",\"fusion\":%d,\"swap_ab\":%d,\"mxfpx\":%d,"
        "\"tile_m\":%d,\"tile_n\":%d,\"tile_k\":%d,\"stages\":%d,"
        "\"kernel_smem\":%ld,\"kernel_align\":%ld,\"kernel_smem_const\":%ld,"
        "\"tensors\":%ld,\"pipelines\":%ld,\"scheduler_response\":%ld,\"tensormaps\":%ld,"
        "\"mainloop_tensors\":%ld,\"mainloop_tensors_align\":%ld,\"mainloop_pipeline\":%ld,"
        "\"mainloop_tensormaps\":%ld,\"epilogue_tensors\":%ld,\"epilogue_shared\":%ld,"
        "\"smem_a\":%ld,\"smem_b\":%ld,\"smem_sfa\":%ld,\"smem_sfb\":%ld,"
        "\"bits_a\":%ld,\"bits_b\":%ld,\"bits_sf\":%ld,\"capacity\":%ld,\"kernel_type\":\"%s\"}%s\n",
        esc(r.act).c_str(), esc(r.weight).c_str(), esc(r.out).c_str(), r.fusion, r.swap_ab, r.mxfpx,
        r.tile_m, r.tile_n, r.tile_k, r.stages, r.kernel_smem, r.kernel_align, r.kernel_smem_const,
        r.tensors, r.pipelines, r.scheduler_response, r.tensormaps, r.mainloop_tensors,
        r.mainloop_tensors_align, r.mainloop_pipeline, r.mainloop_tensormaps, r.epilogue_tensors,
        r.epilogue_shared, r.smem_a, r.smem_b, r.smem_sfa, r.smem_sfb, r.bits_a, r.bits_b,
        r.bits_sf, r.capacity, esc(r.kernel_type).c_str(), i + 1 < reg.size() ? "," : "");
  }
  std::printf("]\n");
  return 0;
}
