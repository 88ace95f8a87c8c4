"""The same NVFP4/MXFP4 code on CUDA gives the CPU's bytes (runs where a GPU exists)."""

import pytest
import torch

from sm120lab.nvfp4 import dequantize_mxfp4, dequantize_nvfp4, quantize_mxfp4, quantize_nvfp4

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_cuda_quantization_is_bit_identical_to_cpu(dtype, layout):
    x = (torch.randn(3, 300, 512) * torch.rand(3, 1, 1) * 4).to(dtype)
    gs = torch.rand(3, 1) * 1000 + 1
    q_cpu = quantize_nvfp4(x, gs, scale_layout=layout)
    q_gpu = quantize_nvfp4(x.cuda(), gs.cuda(), scale_layout=layout)
    assert torch.equal(q_gpu.data.cpu(), q_cpu.data)
    assert torch.equal(q_gpu.scale.cpu().view(torch.uint8), q_cpu.scale.view(torch.uint8))
    assert torch.equal(dequantize_nvfp4(q_gpu).cpu(), dequantize_nvfp4(q_cpu))
    m_cpu, m_gpu = quantize_mxfp4(x), quantize_mxfp4(x.cuda())
    assert torch.equal(m_gpu.data.cpu(), m_cpu.data) and torch.equal(m_gpu.scale.cpu(), m_cpu.scale)
    assert torch.equal(dequantize_mxfp4(m_gpu).cpu(), dequantize_mxfp4(m_cpu))
