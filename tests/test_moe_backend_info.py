"""The backend metadata contract: one BackendInfo record per backend, read through the attributes."""

from __future__ import annotations

import json

import pytest
import torch

from sm120lab.moe.backends import Backend, BackendInfo, Needs, Numerics, all_backends
from sm120lab.moe.faults import all_faults
from sm120lab.moe.variants import all_variants


def test_every_backend_reads_its_attributes_from_one_record():
    for backend in [*all_backends().values(), *all_faults(), *all_variants()]:
        info = backend.info
        assert isinstance(info, BackendInfo) and isinstance(info.numerics, Numerics), backend
        assert (backend.name, backend.summary, backend.numerics, backend.needs, backend.out_dtype, backend.verified) \
            == (info.name, info.summary, info.numerics, info.needs, info.out_dtype, info.verified)
        assert backend.name and backend.name in repr(backend)


def test_registry_names_are_the_records_names():
    assert all(name == b.info.name for name, b in all_backends().items())


def test_numerics_compare_and_serialize_as_their_values():
    assert Numerics.W4A4 == "w4a4" and f"{Numerics.EXACT}" == "exact"
    assert json.dumps({"numerics": Numerics.W4A16}) == '{"numerics": "w4a16"}'
    assert {b.name: str(b.numerics) for b in all_backends().values()}["emulated-w4a4"] == "w4a4"


def test_class_attributes_and_assignments_replace_fields_of_the_record():
    class Base(Backend):
        info = BackendInfo("base", "s", Numerics.EXACT, out_dtype=torch.float64)

    class Child(Base):
        name, numerics = "child", "w4a4"  # one field overridden, the rest inherited

    assert Child.info == BackendInfo("child", "s", Numerics.W4A4, out_dtype=torch.float64)
    assert Base().name == "base" and "name" not in vars(Child)
    b = Child()
    b.name = "renamed"
    assert b.info.name == b.name == "renamed" and Child.info.name == "child"


@pytest.mark.parametrize("kwargs, match", [
    (dict(numerics="w8a8"), r"BackendInfo.numerics must be one of \['exact', 'w4a16', 'w4a4'\], got 'w8a8'"),
    (dict(needs="cuda"), "BackendInfo.needs must be a Needs"),
    (dict(out_dtype="bf16"), "BackendInfo.out_dtype must be a torch.dtype"),
])
def test_bad_fields_are_refused(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        BackendInfo("x", **kwargs)


def test_flashinfer_runner_activation_follows_numerics():
    backends = all_backends()
    for name in ("flashinfer-sm12x-w4a4", "flashinfer-sm12x-w4a16", "flashinfer-b12x-w4a4", "flashinfer-b12x-w4a16"):
        assert backends[name].w4a4 is name.endswith("w4a4")
        assert backends[name].needs == Needs(device="cuda", capabilities=(12,), packages=("flashinfer", "cutlass"),
                                             min_cuda="13.0")
