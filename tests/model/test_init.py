"""Initialisation schemes for training from scratch (vsr.model.init): what each one sets up."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from vsr.model import build_model, load_config
from vsr.model.init import INIT_SCHEMES, he_init, identity_init, init_weights, offset_convs


def tiny(with_tsa: bool = True):
    return build_model(replace(load_config("edvr-tiny"), with_tsa=with_tsa))


def test_identity_init_passes_the_centre_frame_to_the_hr_features():
    model = tiny(with_tsa=False)  # as edvr-s
    identity_init(model, noise=0.0)
    seen = {}
    model.conv_hr.register_forward_hook(lambda m, i, o: seen.setdefault("hr", o))
    x = torch.rand(2, 3, 3, 8, 12)
    model(x)
    nearest = x[:, 1].repeat_interleave(4, dim=2).repeat_interleave(4, dim=3)
    torch.testing.assert_close(seen["hr"][:, :3], nearest, rtol=0, atol=1e-5)


@pytest.mark.parametrize("scheme", ["identity", "he"])
def test_offsets_start_on_the_regular_grid(scheme):
    model = tiny()
    init_weights(model, scheme)
    convs = offset_convs(model)
    assert len(convs) == 4  # PCD: three pyramid levels and the cascade
    assert all(not c.weight.any() and not c.bias.any() for c in convs)


def test_he_init_scales_residual_branches_and_the_last_conv():
    torch.manual_seed(0)
    model = tiny()
    he_init(model)
    std = {n: float(m.weight.detach().std()) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)}
    assert std["feature_extraction.0.conv1"] < 0.2 * std["conv_l2_2"]
    assert std["conv_last"] < 0.2 * std["conv_hr"]


def test_an_unknown_scheme_is_refused_before_touching_the_model():
    from vsr.errors import InputError

    torch.manual_seed(0)
    model = tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(InputError, match="'identiy'.*identity, he, torch"):
        init_weights(model, "identiy")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_torch_scheme_keeps_the_built_weights():
    torch.manual_seed(0)
    a = tiny()
    torch.manual_seed(0)
    b = tiny()
    init_weights(b, "torch")
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    assert set(INIT_SCHEMES) == {"identity", "he", "torch"}
