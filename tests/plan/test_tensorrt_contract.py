"""Contract with the real TensorRT bindings: every ``trt.`` name vsr uses exists in each version it supports.

The names come from the ``tensorrt-cu12-bindings`` wheels of one 10.x and one 11.x release (about 1.3 MB each,
fetched and cached by ``.ci/run``: ``python -m tests.plan.trt_names --fetch``).  Locally, without them, these
tests skip and say how to fetch them; in CI (``CI`` set) a missing wheel fails.
"""

from __future__ import annotations

import os

import pytest

from tests.plan.trt_names import BINDINGS, binding_names, identifiers, used_by_vsr
from tests.plan.trt_standin import TensorRTStandIn
from vsr.plan.tensorrt import SUPPORTED_MAJORS


def _names(major: str) -> frozenset[str]:
    names = binding_names(BINDINGS[major])
    if names is None:
        why = (f"tensorrt-cu12-bindings {BINDINGS[major]} is not cached: run "
               "`python -m tests.plan.trt_names --fetch` (.ci/run does)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return names


def test_the_pinned_bindings_are_the_versions_vsr_supports():
    assert sorted(int(m) for m in BINDINGS) == sorted(SUPPORTED_MAJORS)
    assert all(v.split(".")[0] == m for m, v in BINDINGS.items())


@pytest.mark.parametrize("major", sorted(BINDINGS))
def test_every_trt_name_vsr_uses_exists_in_the_bindings(major):
    names = _names(major)
    used = used_by_vsr()
    assert ("NetworkDefinitionCreationFlag", "STRONGLY_TYPED") in used  # the scan sees vsr's TensorRT code
    missing = [f"{'.'.join(chain)} ({', '.join(where)})" for chain, where in sorted(used.items())
               if any(part not in names for part in chain)]
    assert not missing, f"not in tensorrt {BINDINGS[major]}: " + "; ".join(missing)


def test_the_name_tables_tell_the_versions_apart():
    """The extraction itself: 11.x dropped the FP16 builder flag and EXPLICIT_BATCH; both keep the names vsr
    relies on.  Tail-merged names (``Logger`` inside ``ILogger``) are found."""
    ten, eleven = _names("10"), _names("11")
    assert {"FP16", "EXPLICIT_BATCH"} <= ten and not {"FP16", "EXPLICIT_BATCH"} & eleven
    for name in ("STRONGLY_TYPED", "set_input_shape", "set_tensor_address", "execute_async_v3", "Logger",
                 "Runtime", "num_errors", "OnnxParser", "WORKSPACE"):
        assert name in ten and name in eleven, name
    assert "set_flag" in eleven  # what was removed is the flag, not the method


def test_identifier_tails_start_at_word_boundaries():
    names = identifiers(b"ILogger\0get_num_errors\0UINT8\0kFP16x\0not an identifier\0")
    assert {"ILogger", "Logger", "num_errors", "errors", "INT8"} <= names
    assert "ogger" not in names and "um_errors" not in names and "not an identifier" not in names


@pytest.mark.parametrize("version", sorted(BINDINGS.values()))
def test_the_stand_in_refuses_names_the_real_bindings_lack(version):
    trt = TensorRTStandIn(version)
    assert trt._from_wheel == (binding_names(version) is not None)
    assert int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) >= 0
    with pytest.raises(AttributeError, match="has no attribute 'BuildEngine'"):
        trt.BuildEngine
    if version.startswith("11"):
        with pytest.raises(AttributeError, match="FP16"):
            trt.BuilderFlag.FP16
        with pytest.raises(AttributeError, match="EXPLICIT_BATCH"):
            trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH
    else:
        assert trt.BuilderFlag.FP16 is not None
